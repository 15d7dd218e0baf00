"""The analysis does work linear in the trace: four times the iterations, about four times the work,
never the sixteen a per-step scan of the growing state costs. Measured without a clock, twice:

* the facts and history spans the rules read through the index (``Index.reads``);
* the Python lines executed in ``app.diagnostics`` and ``app.trace`` (index build included), which
  also counts a loop that bypasses the index.

The traces are the synthetic ones of ``app.bench.analysis`` (the engine's own shape, checked below
against the engine on small sizes): a leak that keeps every graph, a loop that touches every rule on
every iteration, and the hostile grid of lists.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import app.diagnostics
import app.trace
from app.bench import analysis
from app.diagnostics import diagnose
from app.diagnostics.context import Context
from app.diagnostics.rules import RULES
from app.schema import DeltaTrace

ROOTS = tuple(str(Path(package.__file__).parent) for package in (app.diagnostics, app.trace))
SLACK = 1.5  # work may grow 1.5× faster than the trace (linear: as fast; quadratic: 4× faster here)


def work(code: str, trace: DeltaTrace) -> tuple[int, int, int]:
    """(index reads, lines executed, findings) of the whole analysis of one trace."""
    lines = 0

    def local(frame, event, arg):  # noqa: ANN001, ANN202
        nonlocal lines
        if event == "line":
            lines += 1
        return local

    def calls(frame, event, arg):  # noqa: ANN001, ANN202
        return local if frame.f_code.co_filename.startswith(ROOTS) else None

    sys.settrace(calls)
    try:
        context = Context.build(trace, code)
        found = [d for rule in RULES for d in rule(context)]
    finally:
        sys.settrace(None)
    return context.index.reads, lines, len(found)


SHAPES = {
    "leak that keeps every graph": (analysis.leak, 50, 200),
    "loop that touches every rule": (analysis.busy, 50, 200),
    "grid of lists appended twice": (lambda n: analysis.grid(n, n), 8, 16),  # 4× the lists
}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_four_times_the_trace_is_about_four_times_the_work(shape: str) -> None:
    make, small, large = SHAPES[shape]
    small_trace, large_trace = make(small), make(large)
    reads_small, lines_small, found_small = work(*small_trace)
    reads_large, lines_large, found_large = work(*large_trace)
    assert found_small > 0 and found_large >= found_small  # the rules did find what they look for
    size = len(large_trace[1].steps) / len(small_trace[1].steps)
    assert size > 3.4
    assert reads_large / reads_small < SLACK * size, (reads_small, reads_large)
    assert lines_large / lines_small < SLACK * size, (lines_small, lines_large)


CHAIN_AFTER = """\
w = torch.randn(4, requires_grad=True)
outs = []
for i in range(3):
    outs.append(w * i)
total = torch.zeros(())
for i in range({n}):
    total = total + (w * i).sum()
    total.backward(retain_graph=True)
"""


def test_many_backward_calls_through_one_growing_graph_cost_its_size() -> None:
    """Did a backward() after the loop use the collected graphs? Each of the later backward() calls
    reaches the whole chain built so far; asking each one anew would cost the chain's size squared."""
    from diagnostics_support import run

    small, large = run(CHAIN_AFTER.format(n=8)), run(CHAIN_AFTER.format(n=32))
    (reads_small, lines_small, found), (reads_large, lines_large, _) = (
        work(small.code, small.trace), work(large.code, large.trace))
    assert found == 2  # the collected graphs, and the chain
    size = len(large.trace.steps) / len(small.trace.steps)
    assert reads_large / reads_small < SLACK * size, (reads_small, reads_large)
    assert lines_large / lines_small < SLACK * size, (lines_small, lines_large)


def test_the_measure_sees_a_per_step_scan() -> None:
    """The same measure, with one more rule that reads every tensor at every step, grows faster than
    the test above allows, by both counts: it would catch such a rule."""
    def scanning(context: Context) -> list:
        for step in range(len(context)):
            view = context.at(step)
            for tid in context.index.names.ever():
                view.tensor(tid)  # type: ignore[arg-type]
        return []

    rules = dict(RULES)
    RULES[scanning] = ("scan",)
    try:
        small, large = work(*analysis.leak(25)), work(*analysis.leak(100))
    finally:
        RULES.clear()
        RULES.update(rules)
    size = len(analysis.leak(100)[1].steps) / len(analysis.leak(25)[1].steps)
    assert large[0] / small[0] > SLACK * size and large[1] / small[1] > SLACK * size


def test_diagnose_never_expands_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(trace: object) -> None:
        raise AssertionError("diagnose expanded the trace to whole steps")

    monkeypatch.setattr("app.trace.delta.expand", refuse)
    monkeypatch.setattr("app.diagnostics.expand", refuse)
    code, trace = analysis.busy(5)
    assert {d.rule for d in diagnose(trace, code)} == {"graph-kept-by-container", "saved-tensor-modified"}


def _without_values(trace: DeltaTrace) -> dict:
    """The trace whole at every step, its forward steps only (the synthetic traces leave out the
    steps inside backward passes), with the random values left out."""
    from app.trace.delta import expand

    data = expand(trace).model_dump()
    data["steps"] = [step for step in data["steps"] if step["phase"] == "forward"]
    for step in data["steps"]:
        for fact in step["tensors"].values():
            fact["values"] = fact["summary"] = None
            for later in ("is_conj", "is_neg", "unavailable"):  # engine fields the synthetic ones lack
                fact.pop(later, None)
        for fact in step["storages"].values():
            fact["values"] = None
    from tests.engine.test_engine_golden import canonical  # backward steps take id numbers too

    return canonical(data)


@pytest.mark.parametrize(("make", "code"), [
    (lambda: analysis.leak(3), analysis.LEAK.format(n=3)),
    (lambda: analysis.busy(3), analysis.BUSY.format(n=3)),
    (lambda: analysis.grid(2, 3, 2), analysis.GRID.format(rows=2, cols=3, rounds=2)),
], ids=["leak", "busy", "grid"])
def test_synthetic_traces_have_the_engines_shape(make, code: str) -> None:  # noqa: ANN001
    """Same steps, lines, ids, facts, names and drops as the engine gives (random values aside)."""
    from app.engine import trace_delta

    synthetic_code, synthetic = make()
    assert synthetic_code == code
    engine = DeltaTrace.model_validate(trace_delta(code))
    assert _without_values(synthetic) == _without_values(engine)
