"""A run that is cut says one true cause — steps, time, size, memory or output — with its figure, in one
notice; the snippet's own errors keep their red box. Checked on the view model and on the fragment."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.render import build_explorer
from app.render.notices import RunLimits
from app.schema import DeltaStep, DeltaTrace, RunError
from app.web.main import create_app
from tests.render.test_pages import Canned, parse

LIMITS = RunLimits(max_steps=10_000, wall_seconds=5, cpu_seconds=5, max_result_bytes=8 * 1024 * 1024,
                   max_stdout_bytes=64 * 1024, memory_mib=512)


def cut(steps: int, kind: str | None = None, error_type: str = "", truncated: bool = False,
        message: str = "The sandbox's own words.") -> DeltaTrace:
    error = RunError(kind=kind, type=error_type, message=message, line=2) if kind else None
    return DeltaTrace(ok=error is None, truncated=truncated, error=error,
                      steps=[DeltaStep(line=1 + i % 2) for i in range(steps)])


CASES = [
    # what the sandbox reports (app/sandbox/child.py, outcome.py) -> the cause and the sentence
    (cut(10_000, truncated=True), "steps", "the steps after step 9,999 were not recorded"),
    (cut(2_310, "timeout", "Timeout"), "time", "stopped at the 5 s limit after 2,310 steps."),
    (cut(0, "timeout", "Timeout"), "time", "stopped at the 5 s limit before its first step."),
    (cut(1_200, "timeout", "CpuTimeout"), "time", "stopped at the 5 s CPU-time limit after 1,200 steps."),
    (cut(173, "output", "ResultTooLarge", truncated=True), "size",
     "reached the size limit of 8.0 MiB after 173 steps"),
    (cut(40, "output", "OutputLimitReached"), "output", "printed more than 64.0 KiB, the limit"),
    (cut(7, "memory", "MemoryError"), "memory", "ran out of memory (a run may use 512 MiB)"),
    (cut(0, "output", "ServerBudget", message="The server stopped preparing this view: 10 s."), "server",
     "The server stopped preparing this view: 10 s."),
]


IDS = [f"{c[1]}{i}" for i, c in enumerate(CASES)]


@pytest.mark.parametrize(("trace", "cause", "sentence"), CASES, ids=IDS)
def test_one_notice_with_the_figure_and_no_error_box(trace: DeltaTrace, cause: str, sentence: str) -> None:
    view = build_explorer(trace, "x = 1\ny = 2\n", limits=LIMITS)
    assert view.error is None
    assert view.notice is not None and view.notice.cause == cause
    assert sentence in view.notice.text
    assert "The sandbox's own words." not in view.notice.text
    assert cause == "output" or "printed" not in view.notice.text


def test_the_snippet_s_own_error_is_a_red_box_and_no_notice() -> None:
    view = build_explorer(cut(3, "runtime", "ValueError", message="bad"), "x = 1\n", limits=LIMITS)
    assert view.notice is None and view.error is not None and view.error.text == "ValueError: bad"


def test_a_finished_run_says_nothing() -> None:
    view = build_explorer(cut(3), "x = 1\n", limits=LIMITS)
    assert view.notice is None and view.error is None


def test_a_run_cut_by_size_shows_one_notice_on_the_page(tmp_path) -> None:
    """The case the issue found: a red "printed more than a run may print" box *and* a yellow "limit
    of N steps" notice for a run that printed nothing and was cut by its trace's size."""
    trace = cut(173, "output", "ResultTooLarge", truncated=True,
                message="The trace is larger than 8 MiB; only the first 173 steps are shown.")
    settings = Settings(data_dir=tmp_path)
    with TestClient(create_app(settings, runner=Canned(trace))) as client:
        html = client.post("/run", data={"code": "x = 1\ny = 2\n"}).text
    boxes = [a for _, a in parse(html).tags if a.get("data-testid") in ("notice", "error")]
    assert [b.get("data-cause") for b in boxes] == ["size"]
    assert "printed more" not in html and "limit of 10,000 steps" not in html
    assert "after 173 steps" in html
    assert parse(html).payload["errorLine"] is None  # nothing to mark red in the editor


def test_no_notice_names_an_internal_id() -> None:
    for trace, _, _ in CASES:
        text = build_explorer(trace, "x = 1\n", limits=LIMITS).notice.text
        assert not re.search(r"\b[tsn]\d+\b", text), text


def test_a_reading_limit_is_said_beside_the_run_and_from_its_first_step() -> None:
    """A list nested deeper than the engine reads: the run goes on to its end, the page says which
    limit left something out, with its figure, from the step it first held."""
    from tests.render.conftest import trace

    code = "import torch\nbox = [torch.ones(1)]\nfor i in range(20):\n    box = [box]\ndone = 1\n"
    run = trace(code)
    assert run.ok and run.error is None
    first = next(i for i, step in enumerate(run.steps) if step.capped)
    view = build_explorer(run, code, limits=LIMITS)
    assert view.notice is None and view.caps is not None and view.caps.cause == "capped"
    assert "containers are read 16 levels deep" in view.caps.text
    assert f"from step {first + 1:,} on" in view.caps.text
    assert build_explorer(cut(3), "x = 1\n", limits=LIMITS).caps is None


def test_what_the_failing_line_printed_is_shown_with_its_error(tmp_path) -> None:
    from tests.render.conftest import trace

    code = "x = 1\ny = print('about to fail') or int('x')\n"  # one line prints, then raises
    run = trace(code)
    assert run.error is not None and run.error.output == "about to fail\n"
    with TestClient(create_app(Settings(data_dir=tmp_path), runner=Canned(run))) as client:
        html = client.post("/run", data={"code": code}).text
    (box,) = [a for _, a in parse(html).tags if a.get("data-testid") == "error-output"]
    assert "about to fail" in html.split('data-testid="error-output"', 1)[1]


def test_an_untraced_end_has_a_title_of_its_own() -> None:
    error = RunError(kind="untraced", type="StepLimitReached", message="The snippet went on.", line=None)
    view = build_explorer(DeltaTrace(ok=False, error=error, steps=[DeltaStep(line=1)]), "x = 1\n")
    assert view.error is not None
    assert view.error.title == "The snippet ran past where the tracer could follow it."
