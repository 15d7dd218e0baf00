"""Bug vs fix in a real browser: both sides drawn, stepping one steps the other to the same line,
both memory charts on one scale, reachable from a pair's run, in an embed, and no serious axe
violation; no sideways overflow on a phone."""

from __future__ import annotations

import re
import urllib.request

import pytest

from app.render.svg_canvas import GAP, PAD
from tests.browser_support import axe_violations, open_page, serious

BUG, FIX = '[data-testid="compare-bug"]', '[data-testid="compare-fix"]'


def _open(page, path: str) -> None:
    page.goto(path)
    page.wait_for_function("() => window.AX && AX.runs >= 2")  # both sides are set up


def _line(page, side: str) -> int:
    label = page.locator(f"{side} [data-testid=step-label]").inner_text()
    return int(re.search(r"line (\d+)", label).group(1))


def _step(page, side: str) -> int:
    return int(page.locator(f"{side} [data-testid=step-slider]").input_value())


def test_both_sides_are_drawn_and_step_together_by_line(page) -> None:
    _open(page, "/compare?example=losses-keep-graphs&step=1")
    for side in (BUG, FIX):
        assert page.locator(f"{side} [data-testid=memory-view] .strip:not([hidden])").count() >= 1
        assert page.locator(f"{side} [data-testid=graph-view] .node:not([hidden])").count() >= 1
        assert page.locator(f"{side} [data-testid=memory-timeline] .tl-bar").count() >= 1
    assert page.locator(f"{BUG} .cl-diff").count() == 1 and page.locator(f"{FIX} .cl-diff").count() == 1
    seen = []
    for _ in range(6):  # through the loop: the same pass, the same line, on both sides
        page.locator(f"{BUG} [data-testid=step-next]").click()
        assert _line(page, FIX) == _line(page, BUG)
        current = page.locator(f"{FIX} .cl[aria-current=step]").get_attribute("data-line")
        assert int(current) == _line(page, BUG)
        seen.append((_step(page, BUG), _step(page, FIX)))
    assert seen == [(s, s) for s in range(1, 7)]  # step=1 opened the first; the pair step in lockstep
    # stepping the fix steps the bug back the same way
    page.locator(f"{FIX} [data-testid=step-first]").click()
    assert _step(page, BUG) == 0 and _line(page, BUG) == 1
    # the keyboard steps the side last used, and the other follows
    page.locator(f"{FIX} [data-testid=step-next]").focus()
    page.keyboard.press("End")
    assert _step(page, BUG) == int(page.locator(f"{BUG} [data-testid=step-slider]").get_attribute("max"))
    # the readout of each chart follows its own side
    readout = page.locator(f"{BUG} [data-role=timeline-readout]").inner_text()
    assert readout.startswith(f"step {_step(page, BUG) + 1}:")


def test_a_failing_bug_and_its_working_fix_stay_matched(page) -> None:
    _open(page, "/compare?example=inplace-through-detach")
    assert page.locator(f"{BUG} [data-testid=error]").count() == 1
    assert page.locator(f"{FIX} [data-testid=error]").count() == 0
    page.locator(f"{FIX} [data-testid=step-first]").click()
    for _ in range(3):
        page.locator(f"{FIX} [data-testid=step-next]").click()
        assert _line(page, BUG) == _line(page, FIX)


def test_the_charts_share_one_scale(page) -> None:
    _open(page, "/compare?example=losses-keep-graphs")
    # pixels per byte of every bar, from the drawn rectangles and the bytes each step held
    ratios = page.evaluate("""() => [...document.querySelectorAll('[data-role=compare-side]')]
      .flatMap(side => {
        const points = JSON.parse(side.querySelector('[data-role=timeline-data]').textContent);
        return [...side.querySelectorAll('.tl-bar')].flatMap(bar => {
          const p = points[+bar.getAttribute('data-goto')], out = [];
          const v = bar.querySelector('.tl-var'), g = bar.querySelector('.tl-graph');
          if (v && p[0]) out.push(+v.getAttribute('height') / p[0]);
          if (g && p[1]) out.push(+g.getAttribute('height') / p[1]);
          return out;
        });
      })""")
    assert len(ratios) > 10 and max(ratios) - min(ratios) < 0.01 * max(ratios)
    # and both charts are as tall on screen
    heights = page.locator("[data-role=compare-side] .tl-chart").evaluate_all(
        "els => els.map(e => e.getBoundingClientRect().height)")
    assert len(heights) == 2 and abs(heights[0] - heights[1]) < 1


def test_a_pairs_run_offers_the_comparison(page) -> None:
    open_page(page, "/?example=losses-keep-graphs")
    link = page.get_by_test_id("compare-link")
    assert link.inner_text() == "Compare with the fix"
    link.click()
    page.wait_for_function("() => window.AX && AX.runs >= 2")
    assert page.locator("[data-role=compare-side]").count() == 2
    open_page(page, "/?example=clone-vs-detach")
    assert page.get_by_test_id("compare-link").count() == 0


@pytest.mark.parametrize("path", ["/compare?example=inplace-through-detach",
                                  "/embed?compare=losses-keep-graphs"])
def test_axe_finds_no_serious_problem_in_the_compare_view(page, path: str) -> None:
    _open(page, path)
    assert page.get_by_role("main").count() == 1 and page.get_by_role("heading", level=1).count() == 1
    assert serious(axe_violations(page)) == []
    page.locator(f"{BUG} [data-testid=step-first]").click()
    page.locator(f"{BUG} [data-testid=memory-view] .fp-name").first.click()  # a tensor's facts shown
    assert serious(axe_violations(page)) == []


@pytest.mark.parametrize("path", ["/compare?example=losses-keep-graphs", "/embed?compare=losses-keep-graphs"])
def test_the_compare_view_fits_a_phone(page, path: str) -> None:
    page.set_viewport_size({"width": 390, "height": 780})
    _open(page, path)
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    boxes = page.locator("[data-role=compare-side]").evaluate_all(
        "els => els.map(e => [e.getBoundingClientRect().left, e.getBoundingClientRect().right])")
    assert len(boxes) == 2 and all(left >= 0 and right <= 390 for left, right in boxes)


@pytest.mark.parametrize(("width", "scheme"), [(360, "light"), (390, "dark"), (800, "light")])
def test_stacked_sides_share_one_sticky_stepper(page, width: int, scheme: str) -> None:
    page.set_viewport_size({"width": width, "height": 780})
    page.emulate_media(color_scheme=scheme)
    _open(page, "/compare?example=inplace-through-detach")
    stepper = page.get_by_test_id("compare-stepper")
    labels = stepper.locator("[data-role=compare-label]")
    # both open at one point of the program: the bug's last step and its match, not the fix's own last
    assert labels.all_inner_texts() == [page.locator(f"{side} [data-testid=step-label]").inner_text()
                                        for side in (BUG, FIX)]
    assert _line(page, BUG) == _line(page, FIX)
    page.locator(f"{FIX} [data-testid=memory-view]").scroll_into_view_if_needed()  # deep in the second side
    top = page.evaluate("() => { const bar = document.querySelector('.topbar'); return bar"
                        " && getComputedStyle(bar).position === 'sticky'"
                        " ? bar.getBoundingClientRect().bottom : 0; }")
    box = stepper.bounding_box()
    assert box is not None and top - 1 <= box["y"] <= top + 2  # in sight, under the top bar if that stays
    before = _step(page, BUG), _step(page, FIX)
    stepper.get_by_test_id("compare-prev").click()
    after = _step(page, BUG), _step(page, FIX)
    assert after[0] < before[0] and _line(page, BUG) == _line(page, FIX)
    assert labels.all_inner_texts() == [page.locator(f"{side} [data-testid=step-label]").inner_text()
                                        for side in (BUG, FIX)]
    stepper.get_by_test_id("compare-next").click()
    assert (_step(page, BUG), _step(page, FIX)) == before
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    assert serious(axe_violations(page)) == []


def test_side_by_side_needs_no_shared_stepper(page) -> None:
    _open(page, "/compare?example=losses-keep-graphs")  # 1440 px: both steppers are in sight
    assert page.get_by_test_id("compare-stepper").is_hidden()


def _width(server: str, query: str) -> float:
    with urllib.request.urlopen(f"{server}/render.svg?{query}", timeout=120) as response:
        return float(re.search(r'width="([0-9.]+)"', response.read().decode()).group(1))


def test_the_compare_picture_is_both_pictures_side_by_side(page, server) -> None:
    page.route("**/favicon.ico", lambda route: route.fulfill(status=204))  # a bare document asks for one
    page.goto("/healthz")  # the server's origin
    page.set_content('<img alt="" src="/render.svg?compare=losses-keep-graphs">')
    page.wait_for_function("() => document.images[0].complete && document.images[0].naturalWidth > 0")
    width = page.evaluate("document.images[0].naturalWidth")
    bug, fix = _width(server, "example=losses-keep-graphs"), _width(server, "example=losses-item")
    assert width == pytest.approx(2 * PAD + GAP + bug + fix, abs=1)
