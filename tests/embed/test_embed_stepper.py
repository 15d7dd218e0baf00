"""A tall embed keeps its step controls in sight while a docs reader scrolls through it.

A docs page on another site (tests/embed/conftest.py's ``docs_site``) frames ``/embed`` with README's
auto-height listener, so the frame is as tall as its run and the page scrolls, not the frame.
Scrolled to the end of the run, the stepper must be inside the window, on top (what is at its
centre is it), and a click there, without any scrolling, steps the run. A frame of fixed height
scrolls itself: there the stepper sticks to the frame's top.
"""

from __future__ import annotations

import pytest

from app.web.permalink import encode_code
from tests.browser_support import readme_listener

CODE = """\
w = torch.arange(12.).reshape(3, 4)
t = w.t()
s = w[1:, ::2]
e = torch.arange(3.).expand(16, 3)
w[2, 0] = -1.0
"""
HEADER = 56  # the docs page's sticky header, declared as scroll-padding-top


def _docs_page(page, server: str, docs_site, *, listener: bool, header: bool = False,
               height: int = 560, width: int = 900) -> None:
    src = f"{server}/embed?code={encode_code(CODE)}&view=memory&autorun=1&readonly=1"
    top = (f'<style>html {{ scroll-padding-top: {HEADER}px }} header {{ position: sticky; top: 0; '
           f'height: {HEADER}px; background: #fff; z-index: 1; margin: 0 }}</style><header>Docs</header>'
           if header else "")
    html = ("<!doctype html><html><head><meta charset=utf-8><title>Docs</title>"
            f'<link rel="icon" href="data:,"></head><body>{top}<h1>A guide</h1><p>Look:</p>'
            f'<iframe src="{src}" title="Autograd Explorer" width="100%" height="{height}" '
            'style="border:0"></iframe>'
            + (readme_listener(server) if listener else "")
            + '<p style="height: 1200px">After the frame.</p></body></html>')
    path = f"/stepper-{int(listener)}{int(header)}{height}.html"
    docs_site.pages[path] = html
    page.set_viewport_size({"width": width, "height": 700})
    page.goto(f"{docs_site.url}{path}")
    frame = page.frame_locator("iframe")
    frame.get_by_test_id("step-label").wait_for()
    assert frame.get_by_test_id("step-label").inner_text() == "Step 5 of 5 · after line 5 ran"


def _stepper_in_window(page, inner) -> dict:
    """The stepper's box in the docs page's window, and what the window shows at its next button."""
    frame_box = page.locator("iframe").bounding_box()
    box = inner.evaluate("""() => {
      const r = document.querySelector('.run > .stepper').getBoundingClientRect();
      const next = document.querySelector('[data-testid=step-prev]').getBoundingClientRect();
      return {top: r.top, bottom: r.bottom, nx: next.left + next.width / 2, ny: next.top + next.height / 2};
    }""")
    return {"top": frame_box["y"] + box["top"], "bottom": frame_box["y"] + box["bottom"],
            "x": frame_box["x"] + box["nx"], "y": frame_box["y"] + box["ny"], "frame": frame_box}


def _scroll_to_the_end_of_the_run(page, inner) -> None:
    """Scroll the docs page (not the frame) until the run's last part is at the window's bottom."""
    end = inner.evaluate("() => document.querySelector('#run').getBoundingClientRect().bottom")
    frame_top = page.evaluate("() => document.querySelector('iframe').getBoundingClientRect().top + scrollY")
    page.evaluate("y => scrollTo(0, y)", frame_top + end - 700)


@pytest.mark.parametrize(("header", "width"), [(False, 900), (True, 900), (False, 390)],
                         ids=["plain page", "sticky header", "phone"])
def test_an_auto_height_embed_keeps_its_stepper_in_sight_at_the_end_of_a_tall_run(page, server, docs_site,
                                                                                 header, width) -> None:
    _docs_page(page, server, docs_site, listener=True, header=header, width=width)
    inner = page.frames[1]
    page.wait_for_function("() => document.querySelector('iframe').getBoundingClientRect().height > 1400")
    frame_h = page.locator("iframe").bounding_box()["height"]
    assert inner.evaluate("() => document.documentElement.scrollHeight - innerHeight") <= 0  # no inner scroll
    assert inner.evaluate("() => document.documentElement.scrollWidth - innerWidth") <= 0  # nor sideways
    _scroll_to_the_end_of_the_run(page, inner)
    run_top = inner.evaluate("() => document.querySelector('#run').getBoundingClientRect().top")
    assert page.locator("iframe").bounding_box()["y"] + run_top < -500  # the stepper's own place is far above
    view_top = HEADER if header else 0
    # the frame hears where the window's view begins and the stepper moves there (a message away)
    inner.wait_for_function("""() => {
      const stepper = document.querySelector('.run > .stepper');
      const said = parseFloat(getComputedStyle(stepper).getPropertyValue('--ax-view-top'));
      return said > 0 && Math.abs(stepper.getBoundingClientRect().top - said) < 1;
    }""")
    shown = _stepper_in_window(page, inner)
    assert abs(shown["top"] - view_top) <= 1, shown  # at the top of what the reader sees, under a header
    assert shown["bottom"] < 700
    # nothing covers it: what the window shows at the button is the frame, and in it the button
    at = page.evaluate("([x, y]) => document.elementFromPoint(x, y).tagName", [shown["x"], shown["y"]])
    assert at == "IFRAME"
    hit = inner.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('[data-step]')?.dataset.step",
                         [shown["x"] - shown["frame"]["x"], shown["y"] - shown["frame"]["y"]])
    assert hit == "prev"
    scrolled = page.evaluate("scrollY")
    page.mouse.click(shown["x"], shown["y"])  # where the reader sees it: no scrolling first
    inner.wait_for_function("() => document.querySelector('[data-testid=step-label]').textContent"
                            ".startsWith('Step 4 of 5')")
    assert page.evaluate("scrollY") == scrolled
    assert page.locator("iframe").bounding_box()["height"] == frame_h  # sticking never grows the frame
    # back at the top of the page the stepper is in its own place again, under the code
    page.evaluate("scrollTo(0, 0)")
    inner.wait_for_function(
        "() => getComputedStyle(document.querySelector('.run > .stepper')).getPropertyValue('--ax-view-top')"
        " === '0px'")
    natural = inner.evaluate("() => document.querySelector('.run > .stepper').getBoundingClientRect().top"
                             " - document.querySelector('#run').getBoundingClientRect().top")
    assert natural == 0
    # a page that takes the frame away (a docs site's client-side navigation) scrolls on without an error
    page.evaluate("document.querySelector('iframe').remove()")
    page.evaluate("scrollBy(0, 50)")
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")


def test_a_fixed_height_embed_scrolls_itself_and_its_stepper_sticks_to_its_top(page, server,
                                                                              docs_site) -> None:
    _docs_page(page, server, docs_site, listener=False, height=500)
    inner = page.frames[1]
    assert inner.evaluate("() => document.documentElement.scrollHeight - innerHeight") > 800  # a tall run
    inner.evaluate("() => scrollTo(0, document.documentElement.scrollHeight)")
    top = inner.evaluate("() => document.querySelector('.run > .stepper').getBoundingClientRect().top")
    assert abs(top) <= 1  # at the frame's own top
    shown = _stepper_in_window(page, inner)
    page.mouse.click(shown["x"], shown["y"])
    inner.wait_for_function("() => document.querySelector('[data-testid=step-label]').textContent"
                            ".startsWith('Step 4 of 5')")


def test_a_stacked_compare_embed_keeps_its_shared_stepper_in_sight(page, server, docs_site) -> None:
    src = f"{server}/embed?compare=losses-keep-graphs&view=memory"
    docs_site.pages["/stepper-compare.html"] = (
        "<!doctype html><html><head><meta charset=utf-8><title>Docs</title>"
        f'<link rel="icon" href="data:,"></head><body><h1>A guide</h1><iframe src="{src}" '
        'title="Autograd Explorer" width="100%" height="560" style="border:0"></iframe>'
        + readme_listener(server) + '<p style="height: 1200px">After the frame.</p></body></html>')
    page.set_viewport_size({"width": 900, "height": 700})  # the sides stack: one stepper steps both
    page.goto(f"{docs_site.url}/stepper-compare.html")
    inner = page.frames[1]
    inner.get_by_test_id("compare-stepper").wait_for()
    page.wait_for_function("() => document.querySelector('iframe').getBoundingClientRect().height > 2000")
    end = inner.evaluate("() => document.querySelector('[data-role=compare]').getBoundingClientRect().bottom")
    page.evaluate("y => scrollTo(0, y)", page.locator("iframe").bounding_box()["y"] + end - 700)
    inner.wait_for_function("""() => {
      const stepper = document.querySelector('[data-role=compare-stepper]');
      const said = parseFloat(getComputedStyle(stepper).getPropertyValue('--ax-view-top'));
      return said > 0 && Math.abs(stepper.getBoundingClientRect().top - said) < 1;
    }""")
    assert page.locator("iframe").bounding_box()["y"] < -1000  # read far below the frame's top
    prev = inner.locator("[data-testid=compare-prev]").bounding_box()  # in the window, like the page's
    assert prev["y"] >= 0 and prev["y"] + prev["height"] <= 700
    labels = inner.locator("[data-role=compare-label]")
    before = labels.all_inner_texts()
    page.mouse.click(prev["x"] + prev["width"] / 2, prev["y"] + prev["height"] / 2)
    inner.wait_for_function("b => [...document.querySelectorAll('[data-role=compare-label]')]"
                            ".map(e => e.textContent).join() !== b.join()", arg=before)
