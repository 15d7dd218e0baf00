"""A run a limit cut (the clock, its output, its memory, the reader's Stop) may have printed after its
last step: no step holds that, the run's ``error.output`` does, and the notice that says the limit
shows it — on the page and in the text view (it was said nowhere: only a red box showed an output)."""

from __future__ import annotations

import pytest

from app.i18n import use_locale
from app.render import build_explorer
from app.schema import DeltaStep, DeltaTrace, RunError
from app.templating import templates
from app.textview import text_view
from tests.render.test_notices import LIMITS


def _run(error: RunError, steps: int = 3, truncated: bool = False) -> DeltaTrace:
    return DeltaTrace(ok=False, truncated=truncated, error=error,
                      steps=[DeltaStep(line=1 + i % 2) for i in range(steps)])


CUTS = [
    RunError(kind="timeout", type="Timeout", message="The snippet ran past 2 s.", line=2, output="epoch 9\n"),
    RunError(kind="timeout", type="CpuTimeout", message="CPU.", line=2, output="epoch 9\n"),
    RunError(kind="timeout", type="Stopped", message="Stopped.", line=2, output="epoch 9\n"),
    RunError(kind="memory", type="MemoryError", message="memory", line=2, output="epoch 9\n"),
]


@pytest.mark.parametrize("error", CUTS, ids=[e.type for e in CUTS])
@pytest.mark.parametrize("truncated", [False, True], ids=["recorded", "past-the-step-limit"])
def test_the_notice_carries_what_the_run_printed_after_its_last_step(error: RunError,
                                                                       truncated: bool) -> None:
    view = build_explorer(_run(error, truncated=truncated), "x = 1\ny = 2\n", limits=LIMITS)
    assert view.error is None and view.notice is not None
    assert view.notice.output == "epoch 9\n"
    assert "| epoch 9" in text_view(_run(error, truncated=truncated), "x = 1\ny = 2\n", LIMITS)


def test_the_page_shows_it_in_the_notice_in_both_languages() -> None:
    trace = _run(CUTS[0], truncated=True)
    partial = templates.get_template("_notices.html")
    for locale, words in (("en", "What the run printed after its last step"), ("zh_CN", "最后一步之后打印")):
        with use_locale(locale):
            view = build_explorer(trace, "x = 1\ny = 2\n", limits=LIMITS)
            page = partial.render(view=view)
        assert 'data-testid="notice-output"' in page and "epoch 9" in page and words in page


def test_a_notice_without_output_shows_no_box() -> None:
    error = RunError(kind="timeout", type="Timeout", message="The snippet ran past 2 s.", line=2)
    view = build_explorer(_run(error), "x = 1\ny = 2\n", limits=LIMITS)
    assert view.notice is not None and view.notice.output == ""
