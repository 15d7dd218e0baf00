"""The graph layout cannot be made a denial of service (issue 25, hole 1): dot (WebAssembly, the real
module) runs on fuel, a work budget it cannot outlive; what it is handed is bounded (edges, ranks
crossed, rank width per component), with the quick placement past either; no call waits on a lock
without a timeout. Graphs of real code keep dot's tidy layout.

No test here races a clock: fuel is counted in WebAssembly work, the same on any machine, and the
CPU cost of a dense graph is compared with a benign one's in the same run."""

from __future__ import annotations

import time

import pytest

from app.render import layout
from app.render.layout import (
    CALL_FUEL,
    DOT,
    MAX_CROSSED,
    MAX_EDGES,
    MAX_RANK,
    RUN_FUEL,
    Box,
    DotStopped,
    LayoutCache,
    lay_out,
    too_dense,
)

from .conftest import explore

PLAIN = "plain layers"  # the words of both notes that say a part was placed quickly


def dense(stacks: int, loop: bool = False, op: str = "torch.stack(v).sum(0)") -> str:
    """The issue's snippet: each new tensor made of every one before it (a dense DAG)."""
    head = "x = torch.ones(3, requires_grad=True)\nv = [x * 1.0]\n"
    if loop:
        return head + f"for i in range({stacks}):\n    v.append({op})\n"
    return head + f"v.append({op})\n" * stacks


def complete_dag(n: int) -> str:
    return "digraph G {" + ";".join(f"v{i} -> v{j}" for i in range(n) for j in range(i + 1, n)) + "}"


def _notes(view) -> list[str]:  # noqa: ANN001
    """Every text any drawing's note takes at any step (its track's runs)."""
    return [run[2] for drawing in view.graph.drawings for run in view.tracks.text.get(drawing.note_k, [])]


# ---------- dot on fuel --------------------------------------------------------------------------

def test_dot_stops_when_its_fuel_runs_out_and_the_next_call_is_unharmed() -> None:
    small = "digraph G { a -> b; b -> c; a -> c }"
    before, _ = DOT.run(small)
    with pytest.raises(DotStopped) as stopped:
        DOT.run(complete_dag(60), fuel=50_000_000)
    assert stopped.value.ran
    after, _ = DOT.run(small)
    assert after == before  # a call stopped midway leaves nothing behind


def test_fuel_is_the_same_work_every_time() -> None:
    source = complete_dag(14)
    used = {DOT.run(source)[1] for _ in range(3)}
    assert len(used) == 1 and 0 < used.pop() < CALL_FUEL


def test_the_module_load_is_waited_for_with_a_timeout() -> None:
    engine = layout._Dot()  # a fresh one, not loaded
    engine._lock.acquire()  # another thread is loading it, and takes long
    try:
        with pytest.raises(DotStopped) as stopped:
            engine.run("digraph { a -> b }", wait=0.05)
        assert not stopped.value.ran
    finally:
        engine._lock.release()


def test_a_busy_layout_places_quickly_and_says_why() -> None:
    """The module not ready in time: the component is placed quickly, not cached (dot next time)."""
    cache = LayoutCache()
    boxes = [Box(f"v{i}", 80, 30, 0, 0) for i in range(3)]
    edges = [("v0", "v1"), ("v1", "v2")]
    engine = layout._Dot()
    engine._lock.acquire()
    saved, layout.DOT = layout.DOT, engine
    try:
        placed = lay_out(boxes, edges, cache)
    finally:
        layout.DOT = saved
        engine._lock.release()
    assert (placed.quick, placed.dense) == (1, 0)
    assert not cache.shapes
    assert lay_out(boxes, edges, cache).quick == 0


def test_a_call_takes_no_lock_once_the_module_is_loaded() -> None:
    """Calls share nothing but the compiled module: one goes ahead while the load lock is held
    (the issue's 97 s layout held a process-wide lock that every other page waited on)."""
    DOT.run("digraph { a -> b }")  # loaded
    DOT._lock.acquire()
    try:
        out, used = DOT.run(complete_dag(8), wait=0.0)
    finally:
        DOT._lock.release()
    assert out.startswith("graph ") and used > 0


# ---------- what dot is handed -------------------------------------------------------------------

def test_the_bounds_on_what_dot_is_handed() -> None:
    chain = [(i, i + 1) for i in range(499)]
    assert not too_dense(500, chain, set())
    fan = [(0, i) for i in range(1, MAX_RANK + 2)]  # one rank wider than MAX_RANK
    assert too_dense(MAX_RANK + 2, fan, set())
    many = [(i, j) for i in range(60) for j in range(i + 1, 60)][:MAX_EDGES + 1]
    assert too_dense(60, many, set())
    # a long chain and edges from its top to its bottom: each crosses every rank between
    span = 400
    long = [(i, i + 1) for i in range(span)] + [(0, span)] * 1 + [(k, span) for k in range(1, 8)]
    crossed = sum(span - k - 1 for k in range(8))
    assert (crossed > MAX_CROSSED) == too_dense(span + 1, long, set())
    assert not too_dense(span + 1, long[:span + 1], set())


def test_a_component_of_many_edges_is_laid_out_in_linear_time() -> None:
    """Edges go to their component in one pass (not a pass over all edges per component)."""
    boxes = [Box(f"v{i}", 40, 20, 0, 0) for i in range(500)]
    pairs = [(f"v{2 * i}", f"v{2 * i + 1}") for i in range(250)]
    placed = lay_out(boxes, pairs, LayoutCache())
    assert len(placed.centres) == 500 and len(placed.routes) == 250


@pytest.mark.parametrize("code", [
    dense(38),
    dense(38, loop=True),
    dense(30, op="torch.cat([t.unsqueeze(0) for t in v]).prod(0)"),
    dense(34, op="torch.stack(v).mean(0) * 2"),
], ids=["issue-snippet", "loop", "cat-prod", "mean"])
def test_a_dense_graph_costs_about_what_a_benign_graph_costs(code: str) -> None:
    """The issue's dense DAG took 97 s of layout; now it is placed quickly, said so, and the whole
    view costs a small multiple of a benign run with as many graph boxes (the 20-step RNN)."""
    from app.bench.graph import RNN

    explore(RNN)  # warm
    started = time.process_time()
    explore(RNN)
    benign = time.process_time() - started
    started = time.process_time()
    view = explore(code)
    spent = time.process_time() - started
    assert any(PLAIN in note for note in _notes(view))
    assert spent < 20 * benign + 1.0, f"{spent:.2f} s of CPU against {benign:.2f} s for the RNN"


def test_one_graph_spends_at_most_its_run_fuel() -> None:
    """Dense components that each pass the bounds: dot gets them until the graph's fuel is spent,
    then the rest is placed quickly."""
    cache = LayoutCache()
    used: list[int] = []
    run = DOT.run

    def counting(source: str, fuel: int = CALL_FUEL, wait: float = 2.0) -> tuple[str, int]:
        assert fuel <= CALL_FUEL
        out, burned = run(source, fuel, wait)
        used.append(burned)
        return out, burned

    boxes, edges = [], []
    for c in range(16):  # different dense components, each within the bounds
        keys = [f"c{c}v{i}" for i in range(24 + c)]
        boxes += [Box(k, 40, 20, 0, 0) for k in keys]
        edges += [(keys[i], keys[j]) for i in range(len(keys)) for j in range(i + 1, len(keys), 2)]
    DOT.run = counting  # type: ignore[method-assign]
    try:
        placed = lay_out(boxes, edges, cache)
    finally:
        DOT.run = run  # type: ignore[method-assign]
    assert used and sum(used) <= RUN_FUEL
    assert placed.dense >= 1 and placed.quick == placed.dense  # after the fuel ran out


@pytest.mark.parametrize("code", [
    "from app.bench.graph import RNN as code",
    "from app.bench.graph import CNN as code",
    "from app.bench.snippets import ADAM as code; code = code.replace('range(100)', 'range(30)')",
    "from app.bench.snippets import DEEP_BACKWARD as code; code = code.format(last='loss.backward()')",
])
def test_graphs_of_real_code_keep_the_tidy_layout(code: str) -> None:
    namespace: dict = {}
    exec(code, namespace)  # noqa: S102 - our own import lines
    view = explore(namespace["code"])
    assert not any(PLAIN in note for note in _notes(view))


def test_the_gallery_keeps_the_tidy_layout() -> None:
    from app.gallery import EXAMPLES

    for example in EXAMPLES:
        assert not any(PLAIN in note for note in _notes(explore(example.code))), example.slug
