"""The embed in a real browser, on another site: a docs page (a second local server, another origin)
frames ``/embed``; the frame renders, the page resizes it from its height messages, and its Open link
opens the playground with the same code. The playground itself refuses to be framed there."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import torch

from app.gallery import get_example
from app.web.permalink import decode_code, encode_code
from tests.browser_support import (
    RUN_TIMEOUT_MS,
    editor_text,
    open_page,
    readme_listener,
    set_code,
    step_label,
    wait_for_run,
)

CLONE = get_example("clone-vs-detach").code
RECORDER = ('<script>window.heights = []; addEventListener("message", function (e) {'
            ' if (e.data && e.data.type === "autograd-explorer:height") heights.push(e.data.height); });'
            '</script>')


def docs_page(body: str) -> str:
    return ("<!doctype html><html><head><meta charset=utf-8><title>Docs</title>"
            "<link rel=\"icon\" href=\"data:,\"></head><body>"
            f"<h1>A guide</h1><p>Look:</p>{RECORDER}{body}<p id=after>After the frame.</p></body></html>")


@pytest.fixture
def context(browser):
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    context.set_default_timeout(RUN_TIMEOUT_MS)
    problems: list[str] = []
    context.allowed = []  # console errors a test expects (a refused frame)

    def watch(page) -> None:
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("console", lambda msg: problems.append(f"console: {msg.text}")
                if msg.type == "error" else None)

    context.on("page", watch)
    yield context
    context.close()
    unexpected = [p for p in problems if not any(a in p for a in context.allowed)]
    assert unexpected == []  # no script error, no CSP violation, in the pages or their frames


def wait_resized(docs) -> int:
    """Wait until the page sized the frame from its latest height message; that height."""
    docs.wait_for_function(
        "() => heights.length > 0 && Math.round("
        "document.querySelector('iframe').getBoundingClientRect().height) === heights[heights.length - 1]"
    )
    return docs.evaluate("() => heights[heights.length - 1]")


def frame_content_height(docs) -> float:
    frame = docs.frames[1]
    return frame.evaluate("() => document.querySelector('[data-role=embed]').getBoundingClientRect().height")


def test_embed_button_snippet_on_another_site_renders_resizes_and_opens(context, server, docs_site) -> None:
    page = context.new_page()
    open_page(page, f"{server}/?example=clone-vs-detach")
    page.get_by_test_id("step-prev").click()
    assert step_label(page) == "Step 3 of 4 · after line 3 ran"
    page.get_by_test_id("embed-button").click()
    snippet = page.get_by_test_id("embed-snippet")
    page.wait_for_function("() => document.querySelector('[data-role=embed-snippet]').value.includes('src=')")
    html = snippet.input_value()
    assert f'src="{server}/embed?code=' in html and "&amp;step=3" in html
    assert "autograd-explorer:height" in html  # with the auto-height listener ...
    assert html.endswith("\n" + readme_listener(server).rstrip("\n"))  # ... the one README.md documents
    image = page.get_by_test_id("embed-image").input_value()
    assert f"]({server}/render.svg?code=" in image

    docs_site.pages["/guide.html"] = docs_page(html)
    docs = context.new_page()
    docs.goto(f"{docs_site.url}/guide.html")
    assert urlsplit(docs.url).port != urlsplit(server).port  # another origin frames the explorer
    frame = docs.frame_locator("iframe")
    frame.get_by_test_id("graph-view").wait_for()
    assert frame.get_by_test_id("step-label").inner_text() == "Step 3 of 4 · after line 3 ran"
    assert frame.get_by_test_id("memory-view").is_visible()
    clone_fn = type(torch.tensor([1.0], requires_grad=True).clone().grad_fn).__name__
    assert frame.locator(".node:not([hidden]) .label", has_text=clone_fn).count() == 1
    inside = docs.frames[1]
    assert editor_text(inside) == CLONE.rstrip("\n")
    assert frame.get_by_test_id("code").get_attribute("aria-readonly") == "true"
    frame.get_by_test_id("code").click()
    for key in ("Enter", "Tab", "x", "Backspace", "Control+x"):  # nothing a reader types writes
        frame.get_by_test_id("code").press(key)
    assert editor_text(inside) == CLONE.rstrip("\n")

    height = wait_resized(docs)
    assert height != 560  # the snippet's starting height was replaced by the content's
    assert abs(frame_content_height(docs) - height) <= 1
    scroll = docs.frames[1].evaluate("() => document.documentElement.scrollHeight - innerHeight")
    assert scroll <= 0  # the whole embed shows: no scrollbar inside the frame

    with context.expect_page() as popup:
        frame.get_by_test_id("open").click()
    playground = popup.value
    wait_for_run(playground, 0)
    assert playground.url.startswith(f"{server}/?")
    assert editor_text(playground) == CLONE
    assert step_label(playground) == "Step 3 of 4 · after line 3 ran", playground.url


def test_editable_dark_graph_embed_runs_on_demand_and_grows(context, server, docs_site) -> None:
    src = f"{server}/embed?code={encode_code(CLONE)}&view=graph&theme=dark"
    docs_site.pages["/edit.html"] = docs_page(
        f'<iframe src="{src}" title="Autograd Explorer" width="100%" height="300" style="border:0"></iframe>'
        + readme_listener(server))
    docs = context.new_page()
    docs.goto(f"{docs_site.url}/edit.html")
    frame = docs.frame_locator("iframe")
    frame.get_by_test_id("run").wait_for()
    idle = wait_resized(docs)
    assert frame.get_by_test_id("graph-view").count() == 0  # no autorun: nothing ran yet
    background = docs.frames[1].evaluate("() => getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 19, 26)"  # theme=dark

    frame.get_by_test_id("run").click()
    frame.get_by_test_id("graph-view").wait_for()
    assert frame.get_by_test_id("memory-view").count() == 0  # view=graph
    docs.wait_for_function("h => heights[heights.length - 1] > h", arg=idle)
    assert wait_resized(docs) > idle

    edited = "a = torch.ones(2, requires_grad=True)\nb = a.exp()\n"
    exp_fn = type(torch.ones(2, requires_grad=True).exp().grad_fn).__name__
    set_code(docs.frames[1], edited)
    frame.get_by_test_id("run").click()
    frame.locator(".node:not([hidden]) .label", has_text=exp_fn).wait_for()
    assert frame.get_by_test_id("step-label").inner_text() == "Step 2 of 2 · after line 2 ran"
    # the link follows once the edited run is on screen (the code is compressed asynchronously)
    docs.frames[1].wait_for_function(
        "() => /[?&]step=2$/.test(document.querySelector('[data-role=open]').href)")
    query = parse_qs(urlsplit(frame.get_by_test_id("open").get_attribute("href")).query)
    assert decode_code(query["code"][0], 20 * 1024) == edited  # Open keeps the edited code ...
    assert query["step"] == ["2"]  # ... and the step on screen


def test_the_playground_refuses_to_be_framed_by_another_site(context, server, docs_site) -> None:
    # chromium says so on the console: that is the refusal this test wants to see
    context.allowed.append("Content Security Policy directive: \"frame-ancestors 'none'\"")
    docs_site.pages["/bad.html"] = docs_page(
        f'<iframe src="{server}/?example=clone-vs-detach" onload="window.loaded = true"></iframe>')
    docs = context.new_page()
    said: list[str] = []
    docs.on("console", lambda msg: said.append(msg.text))
    docs.goto(f"{docs_site.url}/bad.html")
    docs.wait_for_function("() => window.loaded === true")
    assert any("frame-ancestors 'none'" in text for text in said), said
    assert docs.frame_locator("iframe").get_by_test_id("code").count() == 0
    assert not docs.frames[1].url.startswith(server)
