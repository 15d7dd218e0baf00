"""The diagnostics panel and memory timeline in a real browser, against a real server (the page's
own fixtures: ``python -m app serve`` and Debian's chromium). A finding's line jumps to its step and
lights up its tensors; the timeline jumps to the step clicked; no script error, no CSP violation."""

from __future__ import annotations

import re

from tests.browser_support import open_page, step_label


def test_a_finding_jumps_to_its_step_and_lights_up_its_tensors(page) -> None:
    open_page(page, "/?example=losses-keep-graphs")
    panel = page.get_by_test_id("diagnostics")
    item = panel.get_by_test_id("diagnostic")
    assert item.count() == 1 and item.get_attribute("data-rule") == "graph-kept-by-container"
    # one line (issue 27): the label and the title; the message and the fix open from it
    assert "holds 3 graphs" not in item.inner_text()
    assert "holds 3 graphs" in item.text_content() and "losses.append(loss.item())" in item.text_content()
    assert item.get_by_test_id("diagnostic-label").inner_text() == "Graphs kept in a container"
    page.get_by_test_id("step-first").click()
    assert step_label(page).startswith("Step 1 of")
    item.locator(".diag-line").click()
    goto = int(item.get_attribute("data-goto"))
    assert step_label(page) == f"Step {goto + 1} of 12 · after line 5 ran"
    ids = item.get_attribute("data-tensors").split()
    for tid in ids:  # the kept losses, in the memory view, the graph view and the variables bar
        assert page.locator(f".vars .var.diag-hl[data-t='{tid}']:not([hidden])").count() >= 1
        assert page.locator(f"[data-testid=memory-view] .fp.diag-hl[data-t='{tid}']").count() >= 1
    assert page.evaluate("AX.explorer.selected") == ids[0]
    assert "here" in item.get_attribute("class")
    assert "holds 3 graphs" in item.inner_text()  # the click on its line opened it too


def test_the_timeline_shows_growth_and_jumps_to_the_clicked_step(page) -> None:
    open_page(page, "/?example=losses-keep-graphs")
    timeline = page.get_by_test_id("memory-timeline")
    heights = page.locator(".tl-graph").evaluate_all("els => els.map(e => e.getAttribute('height'))")
    graph_heights = [float(h) for h in heights]
    assert graph_heights == sorted(graph_heights) and graph_heights[-1] > graph_heights[0]
    box = timeline.locator("svg").bounding_box()
    page.mouse.click(box["x"] + 2, box["y"] + 2)  # above the first bar: still its step
    assert step_label(page) == "Step 1 of 12 · after line 1 ran"
    page.mouse.click(box["x"] + box["width"] * (9.5 / 12), box["y"] + box["height"] - 2)
    assert step_label(page).startswith("Step 10 of 12 · after line ")
    readout = timeline.locator("[data-role=timeline-readout]").inner_text()
    assert re.fullmatch(r"step 10: [\d,]+ bytes in all — [\d,]+ bytes through variables · "
                        r"[\d,]+ bytes held only by the graph · "
                        r"on a GPU \(model\): [\d,]+ bytes allocated, 2\.0 MiB reserved", readout)
    cursor_x = float(timeline.locator("[data-role=timeline-cursor]").get_attribute("x"))
    assert cursor_x == float(timeline.locator(".tl-bar[data-goto='9']").get_attribute("data-x"))
