"""A run that goes past the step limit runs on unrecorded (``app.engine.run._Unrecorded``); when the
clock then stops it, what it printed after its last recorded step is in no step: the answer carries it
in ``error.output`` and the page shows it in the time limit's notice. It used to be lost twice: the
child's rewording of the timeout (``child._explain``) dropped ``output``, and the page showed the
notice only. The test server's wall clock is 2 s (``sandbox_support.TEST_ENV``), its steps 10,000."""

from __future__ import annotations

import html

from sandbox_support import Server

# 12,000 steps, then a print nobody records, then a loop the clock ends
PAST_THE_LIMIT = """\
for i in range(6000):
    x = i
print('after the limit', x)
while True:
    y = 1
"""


def test_the_output_after_the_step_limit_reaches_the_answer(gated_server: Server) -> None:
    result = gated_server.run(PAST_THE_LIMIT)
    error = result["error"]
    assert error is not None and error["kind"] == "timeout" and result["truncated"]
    assert error["output"] == "after the limit 5999\n"
    assert "after the limit" not in result["steps"][-1]["stdout"]  # no recorded step holds it


def test_the_page_shows_it_with_the_time_limit_notice(gated_server: Server) -> None:
    page = gated_server.client.post("/run", data={"code": PAST_THE_LIMIT})
    assert page.status_code == 200
    text = html.unescape(page.text)
    assert 'data-testid="notice"' in text and 'data-cause="time"' in text
    assert 'data-testid="notice-output"' in text
    assert "after the limit 5999" in text
