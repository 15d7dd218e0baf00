"""The playground page in a real browser: Share sends the editor's code, nothing typed is lost
(drafts, history entries), bad links get the error page, dark mode, accessibility (axe-core from npm)
and phone widths, for the page's own parts (the run fragment #run is checked by its own tests)."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest

from app.gallery import get_example
from app.web.permalink import decode_code
from tests.browser_support import (
    axe_violations,
    editor_text,
    open_page,
    run_code,
    runs,
    serious,
    set_code,
    step_label,
    wait_for_run,
)

CLONE = get_example("clone-vs-detach").code
LOSSES = get_example("losses-item").code
MAX_CODE = 64 * 1024
MARKED = (
    'x = torch.ones(2, requires_grad=True)  # a leaf, None of it "held"\n'
    'y = x * 2.5 + len("ab")\n'
    "z = y @ torch.ones(3)  # 2 != 3\n"
)


def _shared_code(url: str) -> tuple[str, list[str]]:
    query = parse_qs(urlsplit(url).query)
    return decode_code(query["code"][0], MAX_CODE), query.get("step", [])


def _share(page) -> str:
    page.evaluate("() => { AX.lastShared = null; }")
    page.get_by_test_id("share").click()
    page.wait_for_function("() => !!AX.lastShared")
    page.wait_for_function("() => document.querySelector('[data-role=share-short]').value.includes('/s/')")
    return page.evaluate("AX.lastShared")


def test_share_sends_the_code_in_the_editor_and_a_short_link_that_keeps_the_step(page, server) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    open_page(page, "/?example=clone-vs-detach")
    edited = "a = torch.ones(2)\nb = a * 3\n"
    set_code(page, edited)  # typed, not run
    url = _share(page)
    assert _shared_code(url) == (edited, [])  # the editor's code, not the run's
    assert "not run yet" in page.get_by_test_id("share-state").inner_text()
    assert page.evaluate("navigator.clipboard.readText()") == url  # copied at once
    short = page.get_by_test_id("share-short").input_value()
    assert re.fullmatch(re.escape(server) + r"/s/[a-z2-7]+", short)
    page.get_by_test_id("share-copy-short").click()
    page.wait_for_function("s => navigator.clipboard.readText().then(t => t === s)", arg=short)
    page.keyboard.press("Escape")

    before = runs(page)
    page.get_by_test_id("run").click()
    wait_for_run(page, before)
    page.get_by_test_id("step-prev").click()
    url = _share(page)
    assert _shared_code(url) == (edited, ["1"])
    assert "as run" in page.get_by_test_id("share-state").inner_text()
    short = page.get_by_test_id("share-short").input_value()
    assert short.endswith("?step=1")
    other = page.context.new_page()
    other.goto(short)  # /s/<id>?step=1 keeps the step
    wait_for_run(other, 0)
    assert editor_text(other) == edited and step_label(other) == "Step 1 of 2 · line 1"
    other.close()


def test_unrun_edits_survive_a_reload(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    kept = "kept = torch.zeros(2)\nkept.add_(1)\n"
    set_code(page, kept)
    page.reload()  # at once: the draft is written when the page goes, not only after a pause
    wait_for_run(page, 0)
    assert editor_text(page) == kept
    note = page.get_by_test_id("draft-note")
    assert note.is_visible() and "not run yet" in note.inner_text()
    assert page.evaluate("AX.explorer.code") == CLONE  # the views still show what the address says
    assert page.locator(".cm-editor.ax-edited").count() == 1  # ... and the editor says it differs
    note.get_by_role("button", name="Discard them").click()
    assert editor_text(page) == CLONE and not note.is_visible()
    page.reload()
    wait_for_run(page, 0)
    assert editor_text(page) == CLONE and not page.get_by_test_id("draft-note").is_visible()


def test_a_draft_is_offered_not_forced_on_another_link(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    set_code(page, "mine = 1\n")
    page.goto("/?example=losses-item")  # a link to other code opens that code
    wait_for_run(page, 0)
    assert editor_text(page) == LOSSES
    note = page.get_by_test_id("draft-note")
    assert "earlier visit" in note.inner_text()
    note.get_by_role("button", name="Put it in the editor").click()
    assert editor_text(page) == "mine = 1\n"

    page.goto("/?example=clone-vs-detach")
    wait_for_run(page, 0)
    set_code(page, "other = 2\n")
    page.goto("/?example=losses-item")
    wait_for_run(page, 0)
    page.get_by_test_id("draft-note").get_by_role("button", name="Dismiss").click()
    page.reload()  # dismissed: not offered again
    wait_for_run(page, 0)
    assert not page.get_by_test_id("draft-note").is_visible() and editor_text(page) == LOSSES


def test_back_and_forward_walk_through_runs_and_examples(page) -> None:
    open_page(page, "/?example=clone-vs-detach")
    page.get_by_test_id("step-prev").click()
    page.wait_for_function("() => /[?&]step=3$/.test(location.search)")  # the entry keeps its step
    before = runs(page)
    page.get_by_test_id("gallery").select_option("losses-item")
    wait_for_run(page, before)
    mine = "q = torch.ones(1)\n"
    run_code(page, mine)
    page.wait_for_function("() => location.search.startsWith('?code=')")

    before = runs(page)
    page.go_back()
    wait_for_run(page, before)
    assert editor_text(page) == LOSSES and page.evaluate("AX.explorer.code") == LOSSES
    assert page.get_by_test_id("gallery").input_value() == "losses-item"
    before = runs(page)
    page.go_back()
    wait_for_run(page, before)
    assert editor_text(page) == CLONE and step_label(page) == "Step 3 of 4 · line 3"
    before = runs(page)
    page.go_forward()
    page.go_forward()
    page.wait_for_function("code => AX.explorer && AX.explorer.code === code", arg=mine)
    assert editor_text(page) == mine
    page.get_by_test_id("code").click()
    page.keyboard.press("Control+z")  # what Back replaced is in the undo history
    assert editor_text(page) != mine


def test_a_bad_link_gets_the_error_page_and_keeps_its_address(browser, server) -> None:
    context = browser.new_context(base_url=server)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    for address, status in (("/?example=nope", 404), ("/?code=broken!", 400), ("/s/aaaaaaaaaa", 404)):
        response = page.goto(address)
        assert response.status == status
        assert page.url.endswith(address)  # the failing address stays in the bar
        assert page.get_by_role("heading", level=1).is_visible()
        assert page.get_by_test_id("error-address").inner_text() == address
        assert serious(axe_violations(page)) == []
    page.get_by_test_id("error-home").click()
    wait_for_run(page, 0)
    assert editor_text(page) == CLONE
    for theme in ("light", "dark"):  # the embed's error, inside a docs page's frame
        assert page.goto(f"/embed?view=nope&theme={theme}").status == 400
        assert page.get_by_role("main").count() == 1 and serious(axe_violations(page)) == []
    context.close()
    # chromium logs the page's own status; nothing else (no CSP report, no script error)
    assert [p for p in problems if "the server responded with a status of 40" not in p] == []


def test_dark_theme_follows_the_system_and_the_toggle_is_remembered(page) -> None:
    open_page(page)
    theme = "() => document.documentElement.dataset.theme"
    editor_background = "e => getComputedStyle(e).backgroundColor"
    assert page.evaluate(theme) == "light"
    light = page.locator(".cm-editor").evaluate(editor_background)
    page.emulate_media(color_scheme="dark")
    page.wait_for_function(theme + " === 'dark'")
    assert page.locator(".cm-editor").evaluate(editor_background) != light  # the editor follows
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(15, 19, 26)"
    toggle = page.get_by_test_id("theme-toggle")
    assert toggle.get_attribute("aria-pressed") == "true"
    toggle.click()
    assert page.evaluate(theme) == "light" and toggle.get_attribute("aria-pressed") == "false"
    page.reload()
    wait_for_run(page, 0)
    assert page.evaluate(theme) == "light"  # the reader's choice beats the system's
    page.get_by_test_id("theme-toggle").click()
    page.emulate_media(color_scheme="light")
    page.reload()
    wait_for_run(page, 0)
    assert page.evaluate(theme) == "dark"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_problem_in_the_page_and_its_dialogs(page, scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    open_page(page, "/?example=clone-vs-detach")
    assert page.get_by_role("heading", level=1).inner_text() == "Autograd Explorer"
    assert page.get_by_role("main").count() == 1 and page.get_by_role("banner").count() == 1
    # the run fragment (#run) is the render's: its own tests hold it to the same bar
    assert serious(axe_violations(page, exclude=("#run",))) == []
    # every kind of token on every kind of line mark: the step's line, the selected tensor's, the error's
    run_code(page, MARKED)
    page.locator("[data-testid=memory-view] .strip:not([hidden]) .fp .fp-name", has_text="x").first.click()
    assert page.locator(".cm-step-line, .cm-hover-line, .cm-error-line, [data-role=error-note]").count() == 4
    assert serious(axe_violations(page, exclude=("#run",))) == []
    page.get_by_test_id("share").click()
    page.wait_for_function("() => document.querySelector('[data-role=share-short]').value !== ''")
    assert serious(axe_violations(page, include=("[data-role=share-dialog]",))) == []
    page.keyboard.press("Escape")
    page.get_by_test_id("embed-button").click()
    page.wait_for_function("() => document.querySelector('[data-role=embed-snippet]').value !== ''")
    assert serious(axe_violations(page, include=("[data-role=embed-dialog]",))) == []


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_axe_finds_no_serious_problem_in_the_embed(page, theme: str) -> None:
    open_page(page, f"/embed?example=clone-vs-detach&autorun=1&theme={theme}")
    assert page.get_by_role("main").count() == 1
    assert serious(axe_violations(page, exclude=("#run",))) == []


def _overflow(page, selector: str) -> list[str]:
    """Where ``selector``'s elements reach past the viewport's sides or scroll sideways."""
    return page.eval_on_selector_all(selector, """els => els.flatMap(e => {
        const box = e.getBoundingClientRect();
        const out = [];
        if (box.left < -0.5 || box.right > innerWidth + 0.5)
          out.push(`${e.className} at ${box.left}…${box.right}`);
        if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== "auto")
          out.push(`${e.className} scrolls ${e.scrollWidth} > ${e.clientWidth}`);
        return out;
      })""")


@pytest.mark.parametrize("width", [360, 390])
def test_phone_widths_keep_the_page_chrome_on_screen(page, width: int) -> None:
    page.set_viewport_size({"width": width, "height": 780})
    open_page(page, "/?example=inplace-on-a-copy")
    chrome = ".topbar, .topbar > *, .gallery select, .editor-pane, .code-editor, .editor-actions"
    assert _overflow(page, chrome) == []
    page.get_by_test_id("embed-button").click()
    page.wait_for_function("() => document.querySelector('[data-role=embed-snippet]').value !== ''")
    assert _overflow(page, ".embed-dialog, .embed-dialog .dialog-close, .embed-dialog .dialog-field") == []
    page.locator(".embed-dialog .dialog-close").click()
    page.get_by_test_id("share").click()
    assert _overflow(page, ".share-dialog, .share-dialog .dialog-close, .share-dialog .copy-row") == []
    page.keyboard.press("Escape")
    page.goto("/embed?example=inplace-on-a-copy&autorun=1&readonly=1")
    wait_for_run(page, 0)
    assert _overflow(page, ".embed-code, .embed-code .code-editor, .embed-bar") == []
