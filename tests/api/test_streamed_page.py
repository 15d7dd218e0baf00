"""The page drawn from steps fed while the run goes on (``app.web.streamed``) is the page drawn from
the whole answer, and an answer that is not made of the steps fed is drawn from the answer alone."""

from __future__ import annotations

import itertools

import pytest

from app.render.notices import RunLimits
from app.sandbox.runner import unusable
from app.schema import DeltaStep, DeltaTrace
from app.trace.consistency import Problem
from app.trace.delta import compress
from app.web.embed import _embed_drawn, embed_run_context
from app.web.pages import Drawn, StreamedRunContext, playground, render, run_context, try_fix_link
from app.web.streamed import Streamed
from tests import golden

LIMITS = RunLimits()
TRACES = [(g.source, DeltaTrace.model_validate(compress(g.result))) for g in golden.load()]


def _draw(code: str):
    # as the server draws the whole answer (run_fragment): its findings link to their fix
    return lambda result: render("_run.html", **playground(
        run_context(result, code, None, LIMITS, try_fix_link(code)), code))


def _streamed(code: str) -> Streamed[str]:
    return Streamed(lambda: Drawn.run(code, None, LIMITS), _draw(code))


def _frames(trace: DeltaTrace, sizes: tuple[int, ...] = (1, 3, 7)) -> list[list[DeltaStep]]:
    """The trace's own steps in frames of varied sizes, as the pool hands them on."""
    frames, start = [], 0
    for size in itertools.cycle(sizes):
        if start >= len(trace.steps):
            return frames
        frames.append(trace.steps[start:start + size])
        start += size
    return frames


def _consume(streamed: Streamed[str], frames: list[list[DeltaStep]], result: DeltaTrace) -> str:
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


def test_an_answer_not_made_of_the_steps_fed_is_drawn_from_the_answer() -> None:
    """The pool read the answer again (after an unusable one): equal steps, not the ones fed."""
    code, trace = LOOP
    again = DeltaTrace.model_validate(trace.model_dump())
    streamed = _streamed(code)
    page = _consume(streamed, _frames(trace), again)
    assert not streamed.used and page == _draw(code)(again)


def test_a_builder_that_fails_drops_what_was_fed(monkeypatch: pytest.MonkeyPatch) -> None:
    code, trace = LOOP
    added = StreamedRunContext.add

    def fails_at_the_third(self: StreamedRunContext, delta: DeltaStep) -> None:
        if self.build.count == 2:
            raise RuntimeError("a bug")
        added(self, delta)

    monkeypatch.setattr(StreamedRunContext, "add", fails_at_the_third)
    streamed = _streamed(code)
    page = _consume(streamed, _frames(trace), trace)
    monkeypatch.undo()
    assert not streamed.used and streamed.fed == 2
    assert page == _draw(code)(trace)


@pytest.mark.parametrize("which", ["both", "memory", "graph"])
def test_the_embed_fed_step_by_step_is_the_embed_of_the_whole_answer(which: str) -> None:
    for code, trace in TRACES[::10]:
        def draw(result: DeltaTrace, code: str = code) -> str:
            return render("_embed_run.html", **embed_run_context(result, code, 1, which, LIMITS))

        streamed = Streamed(lambda code=code: _embed_drawn(code, 1, which, LIMITS), draw)
        page = _consume(streamed, _frames(trace), trace)
        assert streamed.used == bool(trace.steps) and page == draw(trace)
