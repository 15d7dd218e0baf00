"""A run past the step limit goes on to its end unrecorded (``app.engine.run._Unrecorded``): the page
says which steps were not recorded, in the reader's language — alone when the run ended, beside the
red box when the snippet's own error ended it (what the unrecorded steps printed is in that box)."""

from __future__ import annotations

from app.i18n import use_locale
from app.render import build_explorer
from app.schema import DeltaStep, DeltaTrace, RunError
from tests.render.test_notices import LIMITS


def _run(steps: int, error: RunError | None = None) -> DeltaTrace:
    return DeltaTrace(ok=error is None, truncated=True, error=error,
                      steps=[DeltaStep(line=1 + i % 2) for i in range(steps)])


def test_a_run_that_went_on_to_its_end_says_which_steps_were_not_recorded() -> None:
    view = build_explorer(_run(10_000), "x = 1\ny = 2\n", limits=LIMITS)
    assert view.error is None and view.notice is not None and view.notice.cause == "steps"
    assert "went past the limit of 10,000 steps" in view.notice.text
    assert "the steps after step 9,999 were not recorded" in view.notice.text
    with use_locale("zh_CN"):
        chinese = build_explorer(_run(10_000), "x = 1\ny = 2\n", limits=LIMITS).notice.text
    assert "10,000" in chinese and "9,999" in chinese and "没有记录" in chinese


def test_the_snippet_s_own_error_past_the_limit_keeps_its_red_box_and_says_the_steps_too() -> None:
    error = RunError(kind="runtime", type="RuntimeError", message="shape '[7, -1]' is invalid", line=2,
                     output="199 12.5\n")
    view = build_explorer(_run(9_999, error), "x = 1\ny = 2\n", limits=LIMITS)
    assert view.error is not None and view.error.text.startswith("RuntimeError: shape")
    assert view.error.output == "199 12.5\n"
    assert view.notice is not None and view.notice.cause == "steps" and view.notice.line == 2
    assert "ran on until the error" in view.notice.text
    assert "the steps after step 9,999 were not recorded" in view.notice.text
    with use_locale("zh_CN"):
        chinese = build_explorer(_run(9_999, error), "x = 1\ny = 2\n", limits=LIMITS).notice.text
    assert "出错" in chinese and "没有记录" in chinese


def test_a_run_cut_by_time_past_the_limit_says_the_time_limit() -> None:
    error = RunError(kind="timeout", type="Timeout", message="The snippet ran past 5 s.", line=2)
    view = build_explorer(_run(9_999, error), "x = 1\ny = 2\n", limits=LIMITS)
    assert view.error is None and view.notice is not None and view.notice.cause == "time"
