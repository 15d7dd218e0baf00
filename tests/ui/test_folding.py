"""Folds in a real browser: a leak's losses are one chip and a few strips with a count; both expand
into the list of their members at the step on screen, which follows the steps and lights up."""

from __future__ import annotations

from tests.browser_support import open_page, run_code, step_label

LEAK = (
    "w = torch.randn(4, requires_grad=True)\n"
    "losses = []\n"
    "for i in range(8):\n"
    "    loss = (w * i).sin()\n"
    "    losses.append(loss)\n"
)


def _visible(page, selector: str) -> list[str]:
    return page.locator(f"{selector}:not([hidden])").all_inner_texts()


def test_a_leak_folds_and_its_folds_list_their_members(page) -> None:
    open_page(page)
    run_code(page, LEAK)
    count = page.evaluate("AX.explorer.count")
    chips = _visible(page, ".vars .var")
    assert any(c.startswith("losses[0…7]") and "×8" in c for c in chips), chips
    page.locator(".vars .var[data-state~=fold]:not([hidden])").click()
    names = page.get_by_test_id("vars-list").locator(".fold-item").all_inner_texts()
    assert names == [f"losses[{i}]" for i in range(8)]
    # the list follows the steps: at the first step of the last iteration, losses[7] is not there yet
    page.evaluate("s => AX.go(s)", count - 3)
    names = page.get_by_test_id("vars-list").locator(".fold-item").all_inner_texts()
    assert names == [f"losses[{i}]" for i in range(7)], step_label(page)
    page.evaluate("s => AX.go(s)", count - 1)
    fold = page.get_by_test_id("memory-fold").first
    assert fold.is_visible() and "more like" in fold.inner_text()
    hidden = int(fold.locator("b").inner_text())
    fold.click()
    items = page.locator("[data-fold-list]:not([hidden]) .fold-item")
    assert items.count() >= hidden + 2  # everything the family holds, the strips on screen too
    # a listed member lights up where it is drawn, and shows its facts
    first = items.first
    tid = first.get_attribute("data-t")
    first.hover()
    assert page.locator(f"[data-testid=memory-view] .fp.hl[data-t='{tid}']").count() == 1
    assert "losses[0]" in page.locator("[data-role=detail-title]").inner_text()
    # stepping never hides a member without saying so: the count changes with the steps
    page.get_by_test_id("step-first").click()
    assert not page.get_by_test_id("memory-fold").first.is_visible()
