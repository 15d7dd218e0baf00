"""The engine's work follows what each step changed, not what the run keeps alive: a loop that keeps
every graph it makes, run four times as long, reads about four times the facts — never the sixteen
that reading every kept graph again at each step costs. Counted without a clock: the tensor and node
facts the reader makes over the whole run."""

from __future__ import annotations

import pytest

from app.bench.snippets import KEPT_IN, LEAK_OF, SAVES_OUTPUT, kept_graphs
from app.engine import EngineLimits, trace_delta
from app.engine.reader import Reader

SLACK = 1.5  # work may grow 1.5× faster than the run (linear: as fast; quadratic: 4× faster here)


def facts_read(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(facts read, steps) of one run."""
    count = 0
    tensor_fact, node_fact = Reader._tensor_fact, Reader._node_fact

    def counted(read):  # noqa: ANN001, ANN202
        def wrapper(*args):  # noqa: ANN002, ANN202
            nonlocal count
            count += 1
            return read(*args)
        return wrapper

    with monkeypatch.context() as patch:
        patch.setattr(Reader, "_tensor_fact", counted(tensor_fact))
        patch.setattr(Reader, "_node_fact", counted(node_fact))
        result = trace_delta(source, EngineLimits())
    assert result["ok"] and not result["truncated"], result["error"]
    return count, len(result["steps"])


def _assert_linear(make, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    (small, small_steps), (large, large_steps) = (facts_read(make(n), monkeypatch) for n in (10, 40))
    size = large_steps / small_steps
    assert size > 3.4
    assert large / small < SLACK * size, (small, large)


@pytest.mark.parametrize("op", SAVES_OUTPUT)
@pytest.mark.parametrize("backward", [False, True], ids=["kept", "kept after backward"])
def test_kept_graphs_of_an_op_that_saves_its_output_are_read_once(
        op: str, backward: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch hands such a saved output out as a fresh object at every access: its node was read
    again at every later step, for every graph kept (a ReLU leak's quadratic)."""
    _assert_linear(lambda n: kept_graphs(op, n, backward=backward), monkeypatch)


@pytest.mark.parametrize("keep", KEPT_IN)
@pytest.mark.parametrize("loop", ["for", "while"])
def test_every_container_and_loop_form(keep: str, loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _assert_linear(lambda n: kept_graphs("relu", n, keep, loop), monkeypatch)


def test_the_measure_sees_a_step_that_reads_every_kept_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same count, on an engine that reads every kept node again at each step, grows faster
    than the tests above allow: it would catch one."""
    from app.engine import snapshot

    mark = snapshot.SnapshotTaker._mark

    def mark_everything(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        mark(self, *args, **kwargs)
        self._dirty |= set(self.nodes)

    monkeypatch.setattr(snapshot.SnapshotTaker, "_mark", mark_everything)
    (small, small_steps), (large, large_steps) = (
        facts_read(LEAK_OF.format(n=n, op="relu"), monkeypatch) for n in (10, 40))
    assert large / small > SLACK * large_steps / small_steps
