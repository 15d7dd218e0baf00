"""The page drawn from steps fed while the run goes on (``app.web.streamed``) is the page drawn from
the whole answer, and an answer that is not what was fed is drawn from the answer alone."""

from __future__ import annotations

import itertools
import json

import pytest

from app.config import Settings
from app.render.notices import RunLimits
from app.sandbox.runner import bounds_for, unusable
from app.schema import DeltaTrace
from app.trace.consistency import Problem
from app.trace.delta import compress
from app.web.pages import StreamedRunContext, _Drawn, render, run_context
from app.web.streamed import Streamed
from tests import golden

LIMITS = RunLimits()
TRACES = [(g.source, DeltaTrace.model_validate(compress(g.result))) for g in golden.load()]


def _draw(code: str):
    return lambda result: render("_run.html", **run_context(result, code, None, LIMITS))


def _streamed(code: str) -> Streamed[str]:
    bounds = bounds_for(code, Settings())
    return Streamed(lambda: _Drawn(StreamedRunContext(code, None, LIMITS, bounds)), _draw(code))


def _frames(trace: DeltaTrace, sizes: tuple[int, ...] = (1, 3, 7)) -> list[bytes]:
    """The steps in frames of varied sizes, as the child writes them (a JSON array each)."""
    steps = [step.model_dump(mode="json") for step in trace.steps]
    frames, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= len(steps):
            return frames
        frames.append(json.dumps(steps[start:start + size]).encode())
        start += size
    return frames


def _consume(streamed: Streamed[str], frames: list[bytes], result: DeltaTrace) -> str:
    for frame in frames:
        streamed.feed.put(frame)
    streamed.feed.settle(result)
    return streamed.consume()


@pytest.mark.parametrize(("code", "trace"), TRACES, ids=[f"golden{i}" for i in range(len(TRACES))])
def test_the_page_fed_step_by_step_is_the_page_of_the_whole_answer(code: str, trace: DeltaTrace) -> None:
    streamed = _streamed(code)
    page = _consume(streamed, _frames(trace), trace)
    assert streamed.used == bool(trace.steps) and streamed.fed == len(trace.steps)
    assert page == _draw(code)(trace)


LOOP = next(t for t in TRACES if len(t[1].steps) >= 6)


def test_an_answer_cut_after_the_steps_were_fed_is_drawn_from_the_answer() -> None:
    code, trace = LOOP
    cut = unusable(trace, Problem(3, "a forged step"))
    streamed = _streamed(code)
    page = _consume(streamed, _frames(trace), cut)
    assert streamed.fed == len(trace.steps) and not streamed.used
    assert page == _draw(code)(cut) and "forged step" in page


@pytest.mark.parametrize("bad", [b"[{", b'[{"line": "one"}]', b'{"line": 1}'],
                         ids=["json", "schema", "not a list"])
def test_a_frame_that_does_not_validate_drops_what_was_fed(bad: bytes) -> None:
    code, trace = LOOP
    frames = _frames(trace)
    streamed = _streamed(code)
    page = _consume(streamed, [frames[0], bad, *frames[1:]], trace)
    assert not streamed.used and streamed.fed == 1
    assert page == _draw(code)(trace)


def test_a_step_the_checks_refuse_is_never_drawn() -> None:
    """Fed steps are checked as the whole answer's are: one past the snippet's last line stops the
    speculation before any builder sees it."""
    code, trace = LOOP
    steps = [step.model_dump(mode="json") for step in trace.steps]
    steps[2]["line"] = code.count("\n") + 50
    streamed = _streamed(code)
    page = _consume(streamed, [json.dumps(steps).encode()], trace)
    assert not streamed.used and streamed.fed == 2  # the two before it, then the speculation was dropped
    assert page == _draw(code)(trace)
