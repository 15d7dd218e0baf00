"""The code editor (CodeMirror 6, static/src/editor.js) in a real browser: highlighting under the
strict CSP, undo across examples, the confirmation before edits are replaced, line marks that never
go stale, the error message beside (not over) the code, and the resizable split."""

from __future__ import annotations

from app.gallery import get_example
from tests.browser_support import editor_text, open_page, run_code, runs, set_code, step_label, wait_for_run

CLONE = get_example("clone-vs-detach").code
LOSSES = get_example("losses-item").code


def test_the_editor_highlights_python_under_the_strict_csp(page) -> None:
    response = page.goto("/?example=clone-vs-detach")
    wait_for_run(page, 0)
    csp = response.headers["content-security-policy"]
    assert csp.startswith("default-src 'self'") and "unsafe-inline" not in csp and "style-src" not in csp
    # CodeMirror's layout rules are in force (a refused <style> would stack the gutter above the code)
    gutter = page.locator(".cm-gutters").bounding_box()
    content = page.get_by_test_id("code").bounding_box()
    assert gutter["x"] + gutter["width"] <= content["x"] + 1 and abs(gutter["y"] - content["y"]) < 2
    assert page.get_by_test_id("code").get_attribute("contenteditable") == "true"
    # Python is highlighted: a keyword is drawn in another colour than a plain name
    colour = "e => getComputedStyle(e).color"
    keyword = page.locator(".cm-line span", has_text="True").first.evaluate(colour)
    plain = page.get_by_test_id("code").evaluate(colour)
    assert keyword != plain
    assert editor_text(page) == CLONE  # the page fixture fails on any CSP report or script error


def test_picking_an_example_asks_before_replacing_edits_and_undo_brings_them_back(page) -> None:
    open_page(page)
    mine = "mine = torch.ones(3)\nmine.add_(1)\n"
    set_code(page, mine)
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.get_by_test_id("gallery").select_option("losses-item")
    assert asked and "not been run" in asked[0]
    assert editor_text(page) == mine and page.get_by_test_id("gallery").input_value() == ""

    page.once("dialog", lambda dialog: dialog.accept())
    before = runs(page)
    page.get_by_test_id("gallery").select_option("losses-item")
    wait_for_run(page, before)
    assert editor_text(page) == LOSSES
    assert page.evaluate("AX.explorer.code") == LOSSES
    page.get_by_test_id("code").click()
    page.keyboard.press("Control+z")  # the example's code was one undoable change
    assert editor_text(page) == mine
    page.keyboard.press("Control+y")  # and redo
    assert editor_text(page) == LOSSES


def test_no_line_mark_outlives_its_run(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    assert page.locator(".cm-step-line").count() == 1
    page.locator("[data-testid=memory-view] .strip:not([hidden]) .fp-name").first.click()  # selects a tensor
    assert page.locator(".cm-hover-line").count() == 1
    run_code(page, "x = torch.ones(2)\ny = (\n")  # a syntax error: a run without steps
    assert "Python could not read the snippet" in page.get_by_test_id("error").inner_text()
    assert page.locator(".cm-step-line, .cm-hover-line").count() == 0
    assert page.locator(".cm-error-line").all_inner_texts() == ["y = ("]
    run_code(page, "")  # refused before it runs: no marks at all
    assert "no code to run" in page.get_by_test_id("error").inner_text()
    assert page.locator(".cm-step-line, .cm-hover-line, .cm-error-line, [data-role=error-note]").count() == 0


def test_line_marks_follow_their_lines_while_the_code_is_edited(page) -> None:
    open_page(page)
    run_code(page, "a = torch.ones(2)\nb = a * 2\nc = b + 1\n")
    page.get_by_test_id("step-prev").click()
    assert page.locator(".cm-step-line").all_inner_texts() == ["b = a * 2"]
    page.get_by_test_id("code").click()
    page.keyboard.press("Control+Home")
    page.keyboard.type("import math\n")  # a line above moves the mark down with its line
    assert page.locator(".cm-step-line").all_inner_texts() == ["b = a * 2"]
    assert page.locator(".cm-editor.ax-edited").count() == 1  # and says the code changed since the run
    code = "a = torch.ones(2)\nb = a * 2\nc = b + 1\n"
    for _ in range(4):  # typing is undone in groups
        if editor_text(page) != code:
            page.keyboard.press("Control+z")
    assert editor_text(page) == code
    assert page.locator(".cm-editor.ax-edited").count() == 0  # the run's code again: marks in full


def test_the_editor_and_the_views_split_can_be_resized(page) -> None:
    open_page(page, "/?example=inplace-on-a-copy")
    # the gallery's longest line (66 characters) is not cut at 1440 px
    assert page.locator(".cm-scroller").evaluate("e => e.scrollWidth - e.clientWidth") <= 0
    pane, views = page.locator("#editor-pane"), page.locator("#run")
    width, left = pane.bounding_box()["width"], views.bounding_box()["x"]
    handle = page.get_by_test_id("splitter").bounding_box()
    x, y = handle["x"] + handle["width"] / 2, handle["y"] + 100
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x - 150, y, steps=5)
    page.mouse.up()
    assert abs(pane.bounding_box()["width"] - (width - 150)) <= 2
    assert abs(views.bounding_box()["x"] - (left - 150)) <= 2
    label = step_label(page)
    page.get_by_test_id("splitter").focus()
    page.keyboard.press("ArrowRight")  # keys on the separator resize; they do not step the run
    assert abs(pane.bounding_box()["width"] - (width - 150 + 32)) <= 2
    assert step_label(page) == label
    now = round(pane.bounding_box()["width"])
    assert abs(int(page.get_by_test_id("splitter").get_attribute("aria-valuenow")) - now) <= 1
    page.reload()
    wait_for_run(page, 0)
    assert abs(pane.bounding_box()["width"] - now) <= 2  # remembered


def test_enter_indents_like_python(page) -> None:
    open_page(page)
    set_code(page, "")
    page.get_by_test_id("code").focus()
    # a block opens an indent; a float with a trailing dot ends its statement (no continuation)
    page.keyboard.type("for i in range(2):")
    page.keyboard.press("Enter")
    page.keyboard.type("y = 2. * i")
    page.keyboard.press("Enter")
    page.keyboard.type("w = 100.")
    page.keyboard.press("Enter")
    page.keyboard.press("Shift+Tab")
    page.keyboard.type("z = 1.")
    page.keyboard.press("Enter")
    page.keyboard.type("print(z)")
    assert editor_text(page) == "for i in range(2):\n    y = 2. * i\n    w = 100.\nz = 1.\nprint(z)"
