"""Stop (issue 27): a run on its way can be stopped from the page; the steps the server had are drawn
at once, navigable, with a notice that says the reader stopped it (app/web/stops.py)."""

from __future__ import annotations

import threading
import time

import httpx

from tests.browser_support import open_page, runs, set_code, wait_for_run

# Each iteration a 200 × 200 matmul: it would run until the 5 s wall limit.
ENDLESS = "x = torch.randn(200, 200)\nwhile True:\n    x = torch.tanh(x @ x)\n"


def test_stop_ends_the_run_and_draws_its_steps_so_far(page) -> None:
    open_page(page)
    before = runs(page)
    set_code(page, ENDLESS)
    stop = page.get_by_test_id("stop")
    assert not stop.is_visible()  # only while a run is on its way
    page.get_by_test_id("run").click()
    stop.wait_for(state="visible")
    page.wait_for_timeout(1000)  # let steps come (a stop before the first step draws none)
    stop.click()
    wait_for_run(page, before)
    notice = page.get_by_test_id("notice")
    assert notice.get_attribute("data-cause") == "stopped", notice.inner_text()
    assert "You stopped the run" in notice.inner_text()
    assert not stop.is_visible()
    count = page.evaluate("AX.explorer.count")
    if count > 1:  # the steps so far step as any run's
        page.get_by_test_id("step-first").click()
        assert page.get_by_test_id("step-label").inner_text().startswith(f"Step 1 of {count} ")


def test_a_stop_for_no_run_here_is_404(server: str) -> None:
    for run_id in ("0123456789abcdef0123456789abcdef", "bad id", ""):
        assert httpx.post(f"{server}/run/stop", data={"run_id": run_id}).status_code == 404



def test_a_stop_body_is_read_as_the_page_s_forms_are(server: str) -> None:
    """Bounded and percent-decoded (``app.web.forms``): a run posted with an id is stopped by a body
    that spells the id with an escape, and a body past the bound is refused unread."""
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    assert httpx.post(f"{server}/run/stop", content=b"run_id=" + b"a" * 300, headers=form).status_code == 413
    run_id = "stop-by-escape-0123456789"
    answer: list[httpx.Response] = []
    running = threading.Thread(target=lambda: answer.append(
        httpx.post(f"{server}/run", data={"code": ENDLESS, "run_id": run_id}, timeout=60)))
    running.start()
    escaped = "run_id=" + run_id.replace("-", "%2D")
    stopped = 404
    while stopped == 404 and running.is_alive():  # 404 until the run holds its id
        stopped = httpx.post(f"{server}/run/stop", content=escaped, headers=form).status_code
        time.sleep(0.05)
    running.join()
    assert stopped == 204
    assert "You stopped the run" in answer[0].text
