"""The graph view: what it draws, and that grandalf's layout keeps boxes apart and in place."""

from __future__ import annotations

from itertools import combinations

from app.render import frame_at
from tests.render.conftest import explore, trace_v1

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
    after = frame_at(view, 4)  # backward frees the saved tensors
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
