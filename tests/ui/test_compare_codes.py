"""Any two codes side by side (``code=<token>&compare_code=<token>``) in ``/embed``, ``/compare`` and
``/render.svg``, through the real server: each side run in the sandbox, a side that fails shows why
and the other side is still drawn."""

from __future__ import annotations

import re
import urllib.error
import urllib.request
from urllib.parse import urlencode

import pytest

from app.render.svg_canvas import GAP, PAD
from app.web.permalink import encode_code
from tests.browser_support import axe_violations, open_page, run_code, serious

A = ("losses = []\nfor i in range(3):\n    loss = (torch.ones(2, requires_grad=True) * i).sum()\n"
     "    losses.append(loss)\n")
B = A.replace("losses.append(loss)", "losses.append(loss.item())")
BROKEN = "x = torch.ones(2\n"
RAISES = "x = torch.ones(2)\ny = x @ torch.ones(3)\n"
SIDE_A, SIDE_B = '[data-testid="compare-bug"]', '[data-testid="compare-fix"]'


def _query(a: str, b: str, **more: str) -> str:
    return urlencode({"code": encode_code(a), "compare_code": encode_code(b), **more})


def _open(page, path: str) -> None:
    page.goto(path)
    page.wait_for_function("() => window.AX && AX.runs >= 2")


def _get(server: str, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(server + path, timeout=120) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_two_codes_are_drawn_side_by_side_and_step_together(page) -> None:
    _open(page, "/embed?" + _query(A, B, step="4"))
    assert page.locator(f"{SIDE_A} .compare-badge").text_content() == "Code A"
    assert page.locator(f"{SIDE_B} .compare-badge").text_content() == "Code B"
    # each side is titled by its line the other does not have
    assert page.locator(f"{SIDE_A} .compare-title").inner_text() == "losses.append(loss)"
    assert page.locator(f"{SIDE_B} .compare-title").inner_text() == "losses.append(loss.item())"
    assert page.get_by_role("heading", level=1).inner_text() == "Code A vs code B"
    for side in (SIDE_A, SIDE_B):
        assert page.locator(f"{side} [data-testid=memory-view] .strip:not([hidden])").count() >= 1
    for _ in range(3):  # through the loop: both sides on the same line, the same pass
        page.locator(f"{SIDE_A} [data-testid=step-next]").click()
        a, b = (page.locator(f"{side} [data-testid=step-label]").inner_text() for side in (SIDE_A, SIDE_B))
        assert a == b and re.search(r"after line \d ran", a)
    href = page.get_by_test_id("open").get_attribute("href")
    assert href.startswith("/compare?") and f"compare_code={encode_code(B)}" in href
    assert serious(axe_violations(page)) == []


def test_a_side_that_fails_says_why_and_the_other_is_still_drawn(page) -> None:
    _open(page, "/compare?" + _query(RAISES, B))
    failing, working = page.locator(SIDE_A), page.locator(SIDE_B)
    assert "raised an error" in failing.get_by_test_id("error").inner_text()
    assert working.get_by_test_id("error").count() == 0
    working.get_by_test_id("step-last").click()  # it opened beside the failing line; its run is all there
    assert working.locator("[data-testid=memory-view] .strip:not([hidden])").count() >= 1
    assert page.get_by_test_id("open-fix").get_attribute("href") == "/?" + urlencode({"code": encode_code(B)})
    _open(page, "/embed?" + _query(A, BROKEN))
    assert "could not read" in page.locator(SIDE_B).get_by_test_id("error").inner_text()
    assert page.locator(f"{SIDE_A} [data-testid=memory-view] .strip:not([hidden])").count() >= 1
    page.locator(f"{SIDE_A} [data-testid=step-first]").click()  # stepping the side that ran still works
    assert page.locator(f"{SIDE_A} [data-testid=step-label]").inner_text().startswith("Step 1 of")


def _width(svg: str) -> float:
    return float(re.search(r'width="([0-9.]+)"', svg).group(1))


def test_the_picture_of_two_codes_is_both_pictures(server) -> None:
    status, both = _get(server, "/render.svg?" + _query(A, B))
    assert status == 200 and "Code A vs code B" in both
    alone = [_get(server, "/render.svg?" + urlencode({"code": encode_code(code)}))[1] for code in (A, B)]
    assert _width(both) == pytest.approx(2 * PAD + GAP + _width(alone[0]) + _width(alone[1]), abs=1)
    status, half = _get(server, "/render.svg?" + _query(A, BROKEN))
    assert status == 200 and "Python could not read the snippet" in half and "losses" in half


@pytest.mark.parametrize(("query", "words"), [
    ({"compare_code": encode_code(A)}, "compare_code is compared with code"),
    ({"code": encode_code(A), "compare_code": encode_code(B), "compare": "losses-item"},
     "without s, example"),
    ({"code": encode_code(A), "compare_code": "!!not-a-token"}, "compare_code:"),
])
def test_a_broken_pair_of_codes_is_a_clear_400(server, query: dict, words: str) -> None:
    for route in ("/embed", "/render.svg"):
        status, body = _get(server, f"{route}?{urlencode(query)}")
        assert status == 400 and words in body, (route, body[:300])


def test_the_embed_dialog_hands_out_two_codes_side_by_side(page) -> None:
    open_page(page, "/")
    run_code(page, A)
    page.get_by_test_id("embed-button").click()
    page.get_by_test_id("embed-compare").locator("summary").click()
    page.get_by_test_id("embed-compare-code").fill(B)
    page.wait_for_function(
        "() => document.querySelector('[data-role=embed-snippet]').value.includes('compare_code=')")
    query = f"code={encode_code(A)}&compare_code={encode_code(B)}"
    assert f"/embed?{query}".replace("&", "&amp;") in page.get_by_test_id("embed-snippet").input_value()
    image = page.get_by_test_id("embed-image").input_value()
    assert f"/render.svg?{query}" in image and f"/compare?{query}" in image  # the picture links the page
    assert serious(axe_violations(page, include=("[data-testid=embed-dialog]",))) == []
    _open(page, page.get_by_test_id("embed-preview").get_attribute("href"))
    assert page.locator("[data-role=compare-side]").count() == 2
    assert page.locator(f"{SIDE_B} .compare-title").inner_text() == "losses.append(loss.item())"
