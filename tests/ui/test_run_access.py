"""Accessibility of a run itself (issue 14 §6), not only the page around it: no serious or critical
axe violation in the run's views on the page and in an embed, in both themes, and a keyboard path
to a memory row's facts."""

from __future__ import annotations

import pytest

from tests.browser_support import axe_violations, open_page, serious


@pytest.mark.parametrize(("path", "scheme"), [
    ("/?example=inplace-through-detach", "light"),   # an error, a bumped version, a diagnostic
    ("/?example=freeze-early-layers", "light"),      # a 2-D weight: banded cells
    ("/?example=views-share-storage", "dark"),       # views on one storage, in dark
    ("/embed?example=losses-keep-graphs&autorun=1&theme=dark", "dark"),
])
def test_a_run_has_no_serious_axe_violation(page, path: str, scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    open_page(page, path)
    assert serious(axe_violations(page)) == []
    page.get_by_test_id("step-first").click()  # another step: other marks, the versions before
    assert serious(axe_violations(page)) == []


def test_the_keyboard_reaches_a_memory_rows_facts(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    row = page.locator("[data-testid=memory-view] .strip:not([hidden]) .fp-label").first
    name = row.locator(".fp-name").inner_text()
    row.focus()
    detail = page.get_by_test_id("tensor-detail")
    assert detail.locator("[data-role=detail-title]").inner_text() == name  # focus shows the facts
    page.keyboard.press("Enter")  # and Enter keeps them (selected), as a click does
    tid = row.evaluate("e => e.closest('[data-t]').getAttribute('data-t')")
    assert page.evaluate("AX.explorer.selected") == tid
    page.keyboard.press("Tab")
    assert detail.locator("[data-role=detail-title]").inner_text() != ""
