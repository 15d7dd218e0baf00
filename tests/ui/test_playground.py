"""The playground in a real browser: run, step, highlight, errors in place, permalinks, escaping."""

from __future__ import annotations

import re

from app.gallery import get_example
from app.web.permalink import encode_code
from tests.browser_support import editor_text, open_page, run_code, runs, set_code, step_label, wait_for_run


def _tensor_id(page, name: str) -> str:
    return page.evaluate("name => AX.explorer.root.querySelector(`.var:not([hidden])[data-t]`) && "
                         "[...AX.explorer.root.querySelectorAll('.var:not([hidden])')]"
                         ".find(v => v.querySelector('.var-name').textContent === name).dataset.t", name)


def _cell_texts(page) -> list[str]:
    return page.locator("[data-testid=memory-view] .strip:not([hidden]) .cell b").all_inner_texts()


def test_run_a_gallery_example_and_step_back_and_forth(page) -> None:
    open_page(page)
    before = runs(page)
    page.get_by_test_id("gallery").select_option("views-share-storage")
    wait_for_run(page, before)
    assert step_label(page) == "Step 6 of 6 · line 6"
    assert "100." in _cell_texts(page)  # row[0] = 100. wrote x's first cell
    page.get_by_test_id("step-prev").click()
    assert step_label(page) == "Step 5 of 6 · line 5"
    assert "100." not in _cell_texts(page) and "0." in _cell_texts(page)
    page.get_by_test_id("step-first").click()
    assert step_label(page) == "Step 1 of 6 · line 1"
    names = page.locator(".vars .var:not([hidden]) .var-name").all_inner_texts()
    assert names == ["x"]
    page.locator("body").press("ArrowRight")  # keys step too
    assert step_label(page) == "Step 2 of 6 · line 2"
    assert page.locator(".vars .var:not([hidden]) .var-name").all_inner_texts() == ["x", "t"]
    page.get_by_test_id("step-slider").fill("3")
    assert step_label(page) == "Step 4 of 6 · line 4"
    page.get_by_test_id("step-next").click()
    assert step_label(page) == "Step 5 of 6 · line 5"
    # the editor highlights the step's line, and only that one
    lines = get_example("views-share-storage").code.splitlines()
    assert page.locator(".cm-step-line").all_inner_texts() == [lines[4]]


def test_selecting_a_tensor_highlights_it_in_both_views_and_the_editor(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    x = _tensor_id(page, "x")
    memory_row = page.locator(f"[data-testid=memory-view] .fp[data-t='{x}']:not([hidden]) .fp-name").first
    memory_row.hover()
    graph_box = page.locator(f"[data-testid=graph-view] .node[data-t='{x}']:not([hidden])")
    assert graph_box.count() == 1
    assert "hl" in graph_box.get_attribute("class")
    assert page.locator(f"[data-testid=memory-view] .fp.hl[data-t='{x}']").count() >= 1
    assert page.locator(f".vars .var.hl[data-t='{x}']").count() == 1
    first_line = get_example("clone-vs-detach").code.splitlines()[0]
    assert page.locator(".cm-hover-line").all_inner_texts() == [first_line]  # x was created on line 1
    memory_row.click()
    page.mouse.move(5, 5)  # hover ends; the selection stays
    assert "sel" in graph_box.get_attribute("class")
    detail = page.get_by_test_id("tensor-detail")
    assert page.locator("[data-role=detail-title]").inner_text() == "x"
    assert re.search(r"requires_grad\s+True", detail.inner_text())
    assert re.search(r"is_leaf\s+True", detail.inner_text())
    # the other way round: a box in the graph lights up the memory row
    c = _tensor_id(page, "c")
    page.locator(f"[data-testid=graph-view] .node[data-t='{c}']:not([hidden])").click()
    assert page.locator(f"[data-testid=memory-view] .fp.sel[data-t='{c}']").count() >= 1
    assert re.search(r"grad_fn\s+CloneBackward0", detail.inner_text())


def test_an_error_shows_at_its_line_and_earlier_steps_stay_navigable(page) -> None:
    open_page(page)
    run_code(page, "a = torch.ones(2)\nb = a * 2\nc = a @ torch.ones(3)\nd = b + 1\n")
    error = page.get_by_test_id("error")
    assert "Line 3" in error.inner_text() and "RuntimeError" in error.inner_text()
    assert page.locator(".cm-error-line").all_inner_texts() == ["c = a @ torch.ones(3)"]
    note = page.locator("[data-role=error-note]")
    assert "RuntimeError" in note.inner_text()
    # the message sits between line 3 and line 4: it pushes line 4 down instead of covering it
    line_4 = page.locator(".cm-line", has_text="d = b + 1").bounding_box()
    assert note.bounding_box()["y"] + note.bounding_box()["height"] <= line_4["y"] + 0.5
    assert step_label(page) == "Step 2 of 2 · line 2"
    page.get_by_test_id("step-prev").click()
    assert step_label(page) == "Step 1 of 2 · line 1"


def test_limits_read_as_plain_sentences(page) -> None:
    open_page(page)
    run_code(page, "x = (\n")
    assert "Python could not read the snippet" in page.get_by_test_id("error").inner_text()


def test_a_permalink_reopens_the_code_and_the_step(page, browser, server) -> None:
    open_page(page)
    code = "x = torch.arange(4.)\ny = x[::2]\nz = y * 10\n"
    run_code(page, code)
    page.get_by_test_id("step-prev").click()
    page.get_by_test_id("share").click()
    page.wait_for_function("() => !!AX.lastShared")
    url = page.evaluate("AX.lastShared")
    assert "step=2" in url and "code=" in url
    other = page.context.new_page()
    other.goto(url)
    wait_for_run(other, 0)
    assert editor_text(other) == code
    assert step_label(other) == "Step 2 of 3 · line 2"
    # a link the server made (embed mode, SVG export) opens the same way
    other.goto(f"/?code={encode_code(code)}&step=1")
    wait_for_run(other, 0)
    assert step_label(other) == "Step 1 of 3 · line 1"
    other.close()


def test_printed_markup_stays_text(page) -> None:
    open_page(page)
    run_code(page, (
        'd = {"<img src=x onerror=window.__pwned=1>": torch.ones(2)}\n'
        'print("<script>window.__pwned = 2</script>")\n'
        'raise ValueError("<b>bold</b>")\n'
    ))
    assert page.evaluate("window.__pwned") is None
    assert "<script>window.__pwned = 2</script>" in page.locator("[data-role=stdout]").inner_text()
    injected = "#run img, #run b:not([data-k]):not(.cv), #run script:not([type='application/json'])"
    assert page.locator(injected).count() == 0
    assert "<b>bold</b>" in page.get_by_test_id("error").inner_text()
    assert "<img src=x" in page.locator(".vars .var-name").first.inner_text()


def test_views_stack_on_narrow_screens(page) -> None:
    page.set_viewport_size({"width": 700, "height": 900})
    open_page(page, "/?example=clone-vs-detach")
    memory = page.get_by_test_id("memory-view").bounding_box()
    graph = page.get_by_test_id("graph-view").bounding_box()
    assert graph["y"] >= memory["y"] + memory["height"]
    assert abs(graph["x"] - memory["x"]) < 2


def test_the_editor_indents_with_tab_and_runs_with_ctrl_enter(page) -> None:
    open_page(page)
    set_code(page, "")
    page.get_by_test_id("code").focus()
    page.keyboard.type("for i in range(2):")
    page.keyboard.press("Enter")  # keeps the block's indentation
    page.keyboard.type("y = torch.ones(2) * i")
    page.keyboard.press("Enter")
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Shift+Tab")
    page.keyboard.type("z = y + 1")
    assert editor_text(page) == "for i in range(2):\n    y = torch.ones(2) * i\nz = y + 1"
    assert page.locator(".cm-line").count() == 3
    before = runs(page)
    page.keyboard.press("Control+Enter")
    wait_for_run(page, before)
    assert step_label(page).endswith("line 3")
