"""Stop (issue 27): a run on its way can be stopped from the page; the steps the server had are drawn
at once, navigable, with a notice that says the reader stopped it (app/web/stops.py)."""

from __future__ import annotations

import threading
from urllib.parse import urlsplit

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


def test_a_stop_that_comes_before_its_run_is_not_lost(page) -> None:
    """The page shows Stop as soon as it posts the run; on a busy server (or network) the stop can
    reach the server before the run does. Here the browser holds the run's request until the stop
    was answered: the run then starts stopped (it was lost before, and ran to its 5 s limit)."""
    open_page(page)
    before = runs(page)
    set_code(page, ENDLESS)
    held: list = []
    page.route(lambda url: urlsplit(url).path == "/run", lambda route: held.append(route))
    stop = page.get_by_test_id("stop")
    page.get_by_test_id("run").click()
    stop.wait_for(state="visible")
    with page.expect_response(lambda r: urlsplit(r.url).path == "/run/stop") as asked:
        stop.click()
    assert asked.value.status == 202  # no run here holds the id yet: kept for the run
    (run,) = held
    run.continue_()
    wait_for_run(page, before)
    notice = page.get_by_test_id("notice")
    assert notice.get_attribute("data-cause") == "stopped", notice.inner_text()
    assert "You stopped the run" in notice.inner_text()


def test_a_stop_for_a_malformed_id_is_404_and_a_stop_for_no_run_is_kept(server: str) -> None:
    for run_id in ("bad id", "", "x" * 65):
        assert httpx.post(f"{server}/run/stop", data={"run_id": run_id}).status_code == 404
    unknown = {"run_id": "0123456789abcdef0123456789abcdef"}
    assert httpx.post(f"{server}/run/stop", data=unknown).status_code == 202  # kept, for a while



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
    escaped = "run_id=" + run_id.replace("-", "%2D")  # read as spelt, "%" is no id's: a 404
    # 204 when the run holds its id already, 202 when the stop came first and waits for it
    stopped = httpx.post(f"{server}/run/stop", content=escaped, headers=form).status_code
    running.join()
    assert stopped in (202, 204)
    assert "You stopped the run" in answer[0].text


def test_a_stop_kept_for_its_run_is_bounded_in_time_and_number(monkeypatch) -> None:
    """(``app.web.stops.Stops``, no browser.) A stop for an id no run holds is kept for the run that
    comes under it, within ``EARLY_SECONDS``, for at most ``MAX_EARLY`` ids, the oldest forgotten first."""
    from app.web import stops

    registry = stops.Stops()
    ids = [f"run-{n:016d}" for n in range(stops.MAX_EARLY + 1)]
    assert not any(registry.request(run_id) for run_id in ids)  # none held: all kept
    with registry.open(ids[0]) as first, registry.open(ids[-1]) as last:
        assert not first.requested and last.requested  # the oldest went for the newest
        assert registry.request(ids[-1])  # held now: stopped at once
    monkeypatch.setattr(stops, "EARLY_SECONDS", -1.0)  # every stop kept is past its time
    registry.request("late-0123456789abcdef")
    with registry.open("late-0123456789abcdef") as late:
        assert not late.requested  # kept past its time: a run that came too late is not stopped
    with registry.open("fresh-0123456789abcdef") as fresh:
        assert not fresh.requested
