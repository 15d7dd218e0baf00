"""Stepping needs no server: every step of a 1000-step trace is on the page.

How fast a switch is gets measured by ``python -m app.bench stepping``, not asserted here (shared,
noisy machines).
"""

from __future__ import annotations

from app.bench.stepping import LOOP
from tests.browser_support import open_page, run_code, step_label


def test_stepping_a_1000_step_trace_asks_the_server_nothing(page) -> None:
    open_page(page)
    requests: list[str] = []
    run_code(page, LOOP)
    assert step_label(page).startswith("Step 1000 of 1000")
    # the browser looks at the favicon whenever the address changes (it keeps the step on screen):
    # that is not the page asking for data
    page.on("request", lambda request: None if request.url.endswith("/static/favicon.svg")
            else requests.append(request.url))
    for step in (999, 500, 1):
        page.evaluate("s => AX.go(s)", step - 1)
    page.get_by_test_id("step-next").click()
    page.get_by_test_id("step-first").click()
    assert step_label(page) == "Step 1 of 1000 · line 1"
    # stepping never asks the server (the browser may still fetch the tab's icon, not the explorer)
    assert [url for url in requests if not url.endswith("/favicon.svg")] == []
