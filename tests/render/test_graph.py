"""The graph view: what it draws, folds and inspects, and that its layout keeps boxes apart and in place."""

from __future__ import annotations

import gc
import sys
from collections import Counter
from dataclasses import asdict
from itertools import combinations

import pytest

from app.bench.graph import LEAK_FIRST, LEAK_PERIOD, extend_loop, leak
from app.budget import Budget, use_budget
from app.render import frame_at
from app.render.graph_draw import MAX_UNITS
from app.render.graph_events import GraphEvents
from app.render.layout import Box, LayoutCache, lay_out
from app.render.steps import drive
from app.render.svg_graph import camera, graph_size
from app.schema import DeltaTrace
from app.trace.delta import compress
from tests.golden import load
from tests.render.conftest import explore, run_namespace, trace, trace_v1

GOLDEN_TRACES = list(load())

CLONE = (
    "x = torch.tensor([1., 2., 3.], requires_grad=True)\n"
    "c = x.clone()\n"
    "d = x.detach()\n"
    "loss = (c * c).sum()\n"
    "loss.backward()\n"
)


def _visible(view, step):
    frame = frame_at(view, step)
    return [n for n in view.graph.nodes if frame.shows(n.k)]


def test_nodes_edges_and_saved_tensors() -> None:
    view = explore(CLONE)
    step = 3  # after `loss = ...`, before backward
    frame = frame_at(view, step)
    nodes = _visible(view, step)
    titles = sorted(n.title for n in nodes if n.kind in ("fn", "acc"))
    assert titles == ["AccumulateGrad", "CloneBackward0", "MulBackward0", "SumBackward0"]
    labels = {frame.text(n.label_k): n.kind for n in nodes if n.tensor}
    assert labels == {"x": "leaf", "c": "out", "d": "free", "loss": "out"}
    d_node = next(n for n in nodes if n.kind == "free")
    assert frame.state(d_node.k) == "nograd"
    (mul,) = [n for n in nodes if n.title == "MulBackward0"]
    assert sorted(c.name for c in mul.chips) == ["other", "self"]
    c_id = trace_v1(CLONE).steps[step].variables["c"]
    assert {c.tensor for c in mul.chips} == {c_id}  # c * c saves c twice
    assert all(frame.text(c.text_k).endswith("=c") for c in mul.chips)
    # next_functions: MulBackward0 -> CloneBackward0 twice (c * c), drawn once with a count
    counts = [e.count for e in view.graph.edges if frame.shows(e.k) and e.kind == "next"]
    assert sorted(counts) == [1, 1, 2]
    after = frame_at(view, view.step_count - 1)  # after backward's own steps: the saved tensors freed
    assert all(after.state(c.k) == "freed" for c in mul.chips)


def test_boxes_never_overlap_at_any_step() -> None:
    code = (
        "w = torch.randn(3, requires_grad=True)\n"
        "b = torch.randn(3, requires_grad=True)\n"
        "x = torch.randn(3)\n"
        "h = (w * x + b).tanh()\n"
        "y = (h * h).sum() + w.sum()\n"
        "y.backward()\n"
    )
    view = explore(code)
    for step in range(len(view.lines)):
        for a, b in combinations(_visible(view, step), 2):
            apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
            assert apart, (step, a.key, b.key)


def test_inputs_sit_above_the_nodes_they_feed() -> None:
    view = explore(CLONE)
    by_key = {n.key: n for n in view.graph.nodes}
    for edge in view.graph.edges:
        start = edge.path.split(" ")[0]  # "M<x>,<y>"
        end_y = float(edge.path.rsplit(",", 1)[1])
        start_y = float(start[1:].split(",")[1])
        assert start_y < end_y
    leaf = next(n for n in by_key.values() if n.kind == "leaf")
    acc = next(n for n in by_key.values() if n.kind == "acc")
    assert leaf.y + leaf.h <= acc.y


def test_a_straight_snippet_is_one_layout_whose_camera_never_moves() -> None:
    view = explore(CLONE)
    cameras = {frame_at(view, s).text(view.graph.camera_k) for s in range(1, len(view.lines))}
    assert len(cameras) == 1
    keys = [n.key for n in view.graph.nodes]
    assert len(keys) == len(set(keys))  # one element per vertex: nothing is re-laid out


def test_a_long_loop_stays_readable() -> None:
    code = (
        "w = torch.randn(4, 3, requires_grad=True)\n"
        "x = torch.randn(3)\n"
        "for i in range(60):\n"
        "    y = (w @ x).tanh()\n"
        "    loss = y.sum()\n"
    )
    view = explore(code)
    widths = {int(frame_at(view, s).text(view.graph.camera_k).split()[2]) for s in range(len(view.lines))}
    assert max(widths) < 1200  # the loop's graphs replace each other instead of piling up sideways
    for step in range(0, len(view.lines), 7):
        for a, b in combinations(_visible(view, step), 2):
            apart = a.x + a.w <= b.x or b.x + b.w <= a.x or a.y + a.h <= b.y or b.y + b.h <= a.y
            assert apart, (step, a.key, b.key)


# ---------- folding, stable positions, the inspector, the cap (issue 12) ----------

LEAK = (
    "w = torch.randn(4, requires_grad=True)\n"
    "losses = []\n"
    "for i in range(6):\n"
    "    loss = (w * i).exp().sum()\n"
    "    losses.append(loss)\n"
)


def _shown(drawing, frame):
    return [n for n in drawing.nodes if frame.shows(n.k)]


def test_a_loop_folds_into_one_iteration_that_counts_the_graphs_alive() -> None:
    view = explore(LEAK)
    last = frame_at(view, len(view.lines) - 1)
    alive = len(run_namespace(LEAK)["losses"])  # torch: every appended loss keeps its graph
    unfolded = view.graph.drawing("all")
    assert sum(n.title == "MulBackward0" for n in _shown(unfolded, last)) == alive
    folded = view.graph.drawing("repeats")
    shown = _shown(folded, last)
    titles = sorted(n.title for n in shown if n.kind == "fn")
    assert titles == ["ExpBackward0", "MulBackward0", "SumBackward0"]
    counts = {n.title or last.text(n.label_k): last.text(n.count_k) for n in shown if n.count_k is not None}
    assert counts == {"MulBackward0": f"×{alive}", "ExpBackward0": f"×{alive}", "SumBackward0": f"×{alive}",
                      "loss, losses[5]": f"×{alive}"}
    # the folded box reads like the newest member; the leaf and its AccumulateGrad are not folded
    assert {n.kind for n in shown if not n.folded} == {"leaf", "acc"}
    # early on only one iteration is alive: the same box, counting nothing yet
    third = view.lines.index(5)  # after the first losses.append
    mul = next(n for n in folded.nodes if n.title == "MulBackward0")
    assert frame_at(view, third).shows(mul.k) and frame_at(view, third).text(mul.count_k) == ""


def test_the_fold_is_stable_one_layout_for_every_step() -> None:
    view = explore(LEAK)
    folded = view.graph.drawing("repeats")
    assert folded.layouts == 1
    keys = [n.key for n in folded.nodes]
    assert len(keys) == len(set(keys))  # one element per box, at one place, for every step
    cameras = {frame_at(view, s).text(folded.camera_k) for s in range(len(view.lines))}
    assert len(cameras) == 1


def test_six_graphs_kept_alive_are_folded_by_default() -> None:
    assert explore(LEAK).graph.default == "repeats"  # six chains side by side would be unreadable
    assert explore(CLONE).graph.default == "all"  # a small graph is drawn whole


def test_an_unrolled_rnn_folds_into_one_step_with_its_recurrence() -> None:
    code = (
        "W = torch.randn(4, 4, requires_grad=True)\n"
        "h = torch.zeros(4)\n"
        "for t in range(5):\n"
        "    h = torch.tanh(W @ h + 1)\n"
    )
    view = explore(code)
    last = frame_at(view, len(view.lines) - 1)
    folded = view.graph.drawing("repeats")
    by_title = {n.title: n for n in _shown(folded, last) if n.kind == "fn"}
    assert set(by_title) == {"MvBackward0", "AddBackward0", "TanhBackward0"}
    assert last.text(by_title["TanhBackward0"].count_k) == "×5"
    # the previous step's tanh feeds this step's W @ h: an edge from the Tanh box back to the Mv box
    pairs = {(e.path.split(" ")[0], e.kind) for e in folded.edges if last.shows(e.k)}
    tanh, mv = by_title["TanhBackward0"], by_title["MvBackward0"]
    assert tanh.y > mv.y  # tanh is drawn below what it came from ...
    start = [p for p, _ in pairs]
    assert any(abs(float(s[1:].split(",")[1]) - (tanh.y + tanh.h)) < 2 or
               abs(float(s[1:].split(",")[1]) - tanh.y) < 2 for s in start)  # ... and an edge leaves it


def test_module_blocks_collapse_into_boxes_named_by_their_path() -> None:
    code = (
        "model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))\n"
        "loss = model(torch.randn(2, 3)).sum()\n"
    )
    view = explore(code)
    last = frame_at(view, len(view.lines) - 1)
    names = set(run_namespace("nn = torch.nn\n" + code)["model"].state_dict())  # torch: 0.weight, 0.bias …
    modules = {n.rsplit(".", 1)[0] for n in names}
    drawing = view.graph.drawing("modules")
    shown = _shown(drawing, last)
    assert {n.title for n in shown if n.kind == "module"} == {f"model.{m}" for m in modules}
    leaves = {last.text(n.label_k) for n in shown if n.kind == "leaf"}
    assert not leaves  # every parameter is inside its module's box
    assert any(n.title == "ReluBackward0" for n in shown)  # no parameters: stays outside


def test_the_inspector_knows_saved_versions_then_and_now() -> None:
    code = (
        "x = torch.tensor([1., 2., 3.], requires_grad=True)\n"
        "y = x.exp()\n"
        "alias = y.detach()\n"
        "alias.zero_()\n"
    )
    view = explore(code)
    ns = run_namespace(code)
    inspector = view.graph.inspector
    exp_id = next(nid for nid, (name, _, _) in inspector["nodes"].items() if name == "ExpBackward0")
    name, line, runs = inspector["nodes"][exp_id]
    assert line == 2

    def facts_at(step):
        index = next(v for a, b, v in runs if a <= step <= b)
        return inspector["facts"][index]

    before, after = facts_at(2), facts_at(3)
    (saved,) = before[1]
    assert saved[0] == "result" and saved[3:6] == [0, 0, ""]
    (saved,) = after[1]
    assert saved[3:6] == [0, ns["y"]._version, "modified"]  # torch: zero_() bumped y to version 1
    assert "modified by an inplace operation" in saved[6]
    assert [n[1] for n in after[0]] == ["AccumulateGrad"]  # next_functions


def test_past_the_cap_a_partial_view_says_so_and_the_fold_shows_all() -> None:
    code = "ps = [[torch.zeros(1, requires_grad=True) for _ in range(50)] for _ in range(40)]\n"
    view = explore(code)
    frame = frame_at(view, 0)
    # unfolded, 2,000 boxes: too many for a page while a folded drawing shows them all (MAX_DRAWN_BOXES)
    assert [d.mode for d in view.graph.drawings] == ["repeats"]
    ((mode, title, why),) = view.graph.not_drawn
    assert (mode, title) == ("all", "All nodes") and "2,000 boxes" in why
    (box,) = _shown(view.graph.drawing("repeats"), frame)
    assert frame.text(box.count_k) == "×2000"
    assert view.graph.default == "repeats"
    # drawn anyway, a layout past MAX_UNITS shows the first ones and says so
    from app.render.graph_draw import Drawer
    from app.render.graph_fold import fold
    from app.render.tracks import Tracks

    builder = _graph_builder(code)
    events = builder.observer.events
    sizes = Counter(v.klass for v in events.vertices.values())
    tracks = Tracks()
    drawer = Drawer(tracks, fold(events, "all", sizes), events, view.step_count, builder.cache)
    unfolded, _extent = drawer.draw()
    assert len(unfolded.nodes) == MAX_UNITS
    note = frame_at_tracks(tracks, 0).text(unfolded.note_k)
    assert note.startswith("Graph too large to lay out: showing the first 500 of its 2,000")


def test_a_spent_budget_places_quickly_instead_of_calling_dot() -> None:
    boxes = [Box(f"v{i}", 80, 30, 0, 0) for i in range(6)]
    edges = [("v0", "v1"), ("v1", "v2"), ("v0", "v3"), ("v3", "v2"), ("v4", "v5"), ("v5", "v4")]
    with use_budget(Budget(0.0)):
        placed = lay_out(boxes, edges, LayoutCache())
    assert placed.quick == 2  # both connected components
    for a, b in edges[:4]:  # inputs above what they feed
        assert placed.centres[a][1] < placed.centres[b][1]
    for a, b in combinations(placed.centres, 2):
        (ax, ay), (bx, by) = placed.centres[a], placed.centres[b]
        assert abs(ax - bx) >= 80 or abs(ay - by) >= 30


def test_identical_components_are_laid_out_once() -> None:
    cache = LayoutCache()
    boxes = [Box(f"{c}{i}", 90, 30, 0, 0) for c in "ab" for i in range(3)]
    edges = [("a0", "a1"), ("a1", "a2"), ("b0", "b1"), ("b1", "b2")]
    placed = lay_out(boxes, edges, cache)
    assert cache.dot_calls == 1
    (a0, a1), (b0, b1) = (placed.centres[k] for k in ("a0", "a1")), (placed.centres[k] for k in ("b0", "b1"))
    assert (a1[0] - a0[0], a1[1] - a0[1]) == (b1[0] - b0[0], b1[1] - b0[1])  # the same shape


def test_building_the_graph_leaves_process_state_alone() -> None:
    limit, collecting = sys.getrecursionlimit(), gc.isenabled()
    explore(LEAK + "print(len(losses))\n")
    assert (sys.getrecursionlimit(), gc.isenabled()) == (limit, collecting)


def test_the_svg_never_draws_outside_its_frame() -> None:
    code = (
        "model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8, 2))\n"
        "loss = model(torch.randn(1, 1, 4, 4)).sum()\n"
        "loss.backward()\n"
    )
    view = explore(code)
    for step in range(len(view.lines)):
        frame = frame_at(view, step)
        cam = camera(view, frame)
        if cam is None:
            continue
        x0, y0, w, h = cam
        drawing = view.graph.drawing()
        for n in _shown(drawing, frame):
            assert x0 <= n.x and n.x + n.w <= x0 + w and y0 <= n.y and n.y + n.h <= y0 + h
        for e in drawing.edges:
            if frame.shows(e.k):
                bx0, by0, bx1, by1 = e.box
                assert x0 <= bx0 and bx1 <= x0 + w and y0 <= by0 and by1 <= y0 + h
        panel_w, _ = graph_size(view, frame)
        assert panel_w >= w


def test_the_extended_leak_of_the_benchmark_is_the_engines_own() -> None:
    """The benchmark extends the engine's 3-iteration leak to 1,000; at 5 it equals the engine's."""
    from app.engine import trace_delta

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("values", "summary")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    extended = extend_loop(trace_delta(leak(3)), LEAK_FIRST, LEAK_PERIOD, 5)
    assert strip(extended) == strip(trace_delta(leak(5)))


class _RedrawEveryHolder(GraphEvents):
    """The graph events without the skip: every holder of a re-held tensor redrawn every time."""

    def _reads_the_same(self, tid: str, label: str) -> bool:
        return False


@pytest.mark.parametrize("golden", GOLDEN_TRACES, ids=[g.name for g in GOLDEN_TRACES])
def test_skipping_a_re_held_tensors_holders_changes_nothing_drawn(golden) -> None:
    """The graph's change histories equal those drawn when every holder is redrawn on every change
    of holders, on every golden trace (the skip keeps a weight saved by 1,000 nodes O(1) per step)."""
    trace = DeltaTrace.model_validate(compress(golden.result))
    fast, full = GraphEvents(), _RedrawEveryHolder()
    drive(trace, [_Feed(fast), _Feed(full)])
    assert asdict(fast.events) == asdict(full.events)


class _Feed:
    def __init__(self, events: GraphEvents) -> None:
        self.events = events

    def add_step(self, step) -> None:
        self.events.add_step(step)


def test_a_chain_of_thousands_of_nodes_built_by_one_line_is_drawn() -> None:
    """One line builds a 1,500-node chain: the view is built (no recursion as deep as the chain)."""
    code = "import torch\nh = torch.ones(2, requires_grad=True)\nhs = [h := h * 1.01 for _ in range(1500)]\n"
    view = explore(code)
    assert view.step_count == 3
    assert view.graph.nodes  # drawn (folded or capped), not failed
    assert sys.getrecursionlimit() == 1000  # and nothing raised the limit to get there


def _graph_builder(code: str):  # noqa: ANN202 - the graph's builder, fed the whole run
    from app.render.graph import GraphBuilder
    from app.render.tracks import Tracks

    builder = GraphBuilder(Tracks())
    drive(trace(code), [builder])
    return builder


def frame_at_tracks(tracks, step: int):  # noqa: ANN001, ANN201
    from app.render.tracks import Frame

    tracks.close(step + 1)
    return Frame(tracks, step)
