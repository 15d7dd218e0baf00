"""What is drawn, explained, in a real browser: the legend (every mark, a keyboard away, axe-clean)
and one unit style for bytes wherever the page writes them."""

from __future__ import annotations

import re

from tests.browser_support import axe_violations, open_page, run_code, serious

MARKS = ("index", "changed", "many", "elements", "bar", "groups", "grid", "version", "chips", "edges",
         "unreached", "held", "gpu")
THREE_MIB = "x = torch.zeros(768, 1024)  # 3 MiB of float32\ny = x + 1\nz = y.sum()\n"


def test_the_legend_explains_every_mark_and_opens_from_the_keyboard(page) -> None:
    open_page(page, "/?example=inplace-through-detach")
    legend = page.get_by_test_id("legend")
    assert [item.get_attribute("data-mark") for item in legend.locator(".legend-item").all()] == list(MARKS)
    assert not legend.locator(".legend-list").is_visible()
    legend.locator("summary").focus()
    page.keyboard.press("Enter")
    assert legend.locator(".legend-list").is_visible()
    text = legend.inner_text()
    for words in ("Yellow: this step wrote the cell", "×3", "elements 6–11", "after @, the storage cell", "▲",
                  "one bar", "grouped by what they are",
                  "nn.Linear weight is already at v1", "Struck through: freed",
                  "Dashed blue", "Held by the graph", "a model of PyTorch's CUDA caching allocator"):
        assert words in text, words
    # the samples are drawn with the views' own styles: the changed cell is the views' yellow
    sample = legend.locator("[data-mark=changed] .cv").evaluate("e => getComputedStyle(e).backgroundColor")
    cell = page.locator("[data-testid=memory-view] .cv").first.evaluate(
        "e => { e.setAttribute('data-state', 'changed'); return getComputedStyle(e).backgroundColor; }")
    assert sample == cell and sample != "rgba(0, 0, 0, 0)"
    assert serious(axe_violations(page, include=("[data-testid=legend]",))) == []


def test_bytes_are_written_in_one_unit_style(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    run_code(page, THREE_MIB)
    page.get_by_test_id("step-first").click()
    page.get_by_test_id("step-next").click()  # y = x + 1: 6 MiB alive
    strips = page.locator("[data-testid=memory-view] .strip:not([hidden]) .size").all_inner_texts()
    assert any(text.endswith("3.0 MiB") for text in strips), strips
    readout = page.locator("[data-role=timeline-readout]").inner_text()
    assert "6.0 MiB through variables" in readout, readout
    page.get_by_test_id("step-last").click()
    peak = page.locator("[data-role=timeline-readout]").inner_text()
    page.locator("[data-testid=memory-view] .fp-name", has_text="x").first.click()
    facts = page.get_by_test_id("tensor-detail").inner_text()
    assert "3.0 MiB" in facts, facts
    written = " ".join([*strips, readout, peak, facts, page.locator("#run").inner_text()])
    for value, unit in re.findall(r"([0-9][0-9,]*\.[0-9]) (KiB|MiB|GiB)", written):
        assert float(value.replace(",", "")) < 1024 or unit == "GiB", (value, unit)
