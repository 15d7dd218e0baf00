"""The page's view of a backward pass (issue 13), held against torch itself.

In every backward step the graph view marks the node that ran (named as torch names the node it ran
then) and writes on each edge the gradient that node sent along it: those are the gradients torch's
own node hooks see in a plain run. At the end of a pass, what is dimmed is what torch left without a
gradient. The stepper's passes and the /render.svg and /embed step= addressing come with it.
"""

from __future__ import annotations

import io
from collections import Counter
from contextlib import redirect_stdout

import pytest
import torch
from fastapi.testclient import TestClient

from app.config import Settings
from app.gallery import get_example
from app.render import build_explorer
from app.render.backward import pass_at
from app.render.explorer import client_payload, phase_text
from app.render.graph_backward import PASS_OVER, grad_text, unreached
from app.render.names import short_node_name
from app.render.svg import render_svg
from app.render.tracks import value_at
from app.web.main import create_app
from app.web.permalink import encode_code
from tests.engine.test_engine_backward import CASES as ENGINE_CASES
from tests.engine.test_engine_backward import hooked_plain
from tests.render.conftest import trace, trace_v1

# the engine's own backward cases (held against torch there), and one edge taken twice
CASES = {**ENGINE_CASES, "a square: one edge twice": """
x = torch.tensor([1., 3.], requires_grad=True)
h = x * 1
(h * h).sum().backward()
"""}


def _code(source: str) -> str:
    return source.strip("\n") + "\n"


def _text(values: list | float) -> str:
    """A gradient torch's hooks saw (as nested lists), as the graph view writes it."""
    dims, inner = [], values
    while isinstance(inner, list):
        dims.append(len(inner))
        inner = inner[0] if inner else None
    return grad_text(values, dims)


def _edge_texts(view) -> dict[tuple[str, str], int]:  # noqa: ANN001
    """(src vertex, dst vertex) -> the text key of that edge's gradient in the "all" drawing."""
    return {ident[2:4]: k for ident, k in view.tracks.keys.items()
            if isinstance(ident, tuple) and ident[:2] == ("e", "all") and ident[-1] == "grad"}


@pytest.mark.parametrize("name", CASES)
def test_each_backward_step_shows_the_node_torch_ran_and_the_gradients_it_sent(name: str) -> None:
    source = _code(CASES[name])
    delta, steps = trace(source), trace_v1(source).steps
    view = build_explorer(delta, source)
    tracks, drawing, texts = view.tracks, view.graph.drawing("all"), _edge_texts(view)
    want = hooked_plain(source)  # torch's own node hooks, in a plain run
    assert len(view.passes) == len(want)
    compared = 0
    for mine, theirs in zip(view.passes, want, strict=True):
        assert mine.names == [short_node_name(n) for n, _ in theirs]  # the stepper's names, torch's order
        for offset, (torch_name, sent) in enumerate(theirs):
            index = mine.first + offset
            step = steps[index]
            ran = [n for n in drawing.nodes if "ran" in (value_at(tracks.state.get(n.k, []), index) or "")
                   and value_at(tracks.vis.get(n.k, []), index)]
            assert [n.title for n in ran] == [short_node_name(torch_name)]
            node = step.nodes[step.node]
            by_edge: dict[tuple[str, str], list[str]] = {}
            for nxt, grad in zip(node.next, sent, strict=True):
                if nxt is not None and grad is not None:
                    by_edge.setdefault((f"n:{nxt}", f"n:{step.node}"), []).append(_text(grad))
            for pair, parts in by_edge.items():
                got = value_at(tracks.text[texts[pair]], index)
                assert got == " + ".join(parts), (name, torch_name, pair, got, parts)
                compared += 1
        senders = len(theirs) - sum(n == "AccumulateGrad" for n, _ in theirs)
        assert compared >= senders  # every node but AccumulateGrad sends something
        compared = 0
        assert phase_text(view, mine.first) == f"backward · node 1 of {len(theirs)} · {mine.names[0]}"
    # the marks end with the line's own step: the step after it shows none (unless another pass starts)
    for p in view.passes:
        after = p.own + 1
        if after < view.step_count and pass_at(list(view.passes), after) is None:
            states = [value_at(tracks.state.get(e.k, []), after) or "" for e in drawing.edges]
            assert not any("grad" in state for state in states)


def test_the_leaf_edge_carries_what_accumulated_into_grad() -> None:
    source = _code(CASES["two paths into one leaf"])
    view = build_explorer(trace(source), source)
    steps = trace_v1(source).steps
    last = view.passes[0].last  # AccumulateGrad
    acc = steps[last].node
    got = value_at(view.tracks.text[_edge_texts(view)[(f"leaf:{acc}", f"n:{acc}")]], last)
    a = torch.tensor([1., 2., 3.])
    assert got == _text((2 + a.cos()).tolist())


def test_what_no_gradient_reached_is_dimmed_at_the_end_of_the_pass() -> None:
    example = get_example("backward-stopped-by-detach")
    source = example.code
    view = build_explorer(trace(source), source)
    tracks, nodes = view.tracks, view.graph.drawing("all").nodes
    (p,) = view.passes

    def dimmed(step: int) -> set[str]:
        return {value_at(tracks.text.get(n.label_k, []), step) or n.title for n in _dimmed(view, nodes, step)}

    namespace: dict = {"torch": torch}
    with redirect_stdout(io.StringIO()):
        exec(compile(source, "<plain>", "exec"), namespace)  # noqa: S102
    missed = {n for n in ("w", "b") if namespace[n].grad is None}
    assert missed == {"w"}
    assert dimmed(p.own) == missed and dimmed(p.last) == missed
    assert dimmed(p.first) == set()  # only once the pass is over
    assert dimmed(p.own + 1) == set()


def _dimmed(view, nodes, step: int) -> list:  # noqa: ANN001
    """The boxes on screen at ``step`` the view dims (as /render.svg and the page's CSS do)."""
    tracks, pass_k = view.tracks, view.graph.pass_k
    container = (value_at(tracks.state.get(pass_k, []), step) or "") if pass_k is not None else ""
    return [n for n in nodes if value_at(tracks.vis.get(n.k, []), step)
            and unreached(n.kind, value_at(tracks.state.get(n.k, []), step) or "", container)]


LEAVES = """
ws = [torch.ones(2, requires_grad=True) for _ in range({n})]
outs = [(w * 2).sum() for w in ws]
outs[0].backward()
done = True
"""


@pytest.mark.parametrize("n", [3, 40])
def test_what_a_pass_leaves_unreached_costs_one_state_run_however_large_the_graph(n: int) -> None:
    """Every graph but the first is left without a gradient (torch: their leaves' .grad stays None)
    and dimmed, yet the boxes' own state runs are only the marks of the nodes that ran: the pass adds
    one run on the container, not one per box it did not reach."""
    source = _code(LEAVES.format(n=n))
    view = build_explorer(trace(source), source)
    tracks, nodes = view.tracks, view.graph.drawing("all").nodes
    (p,) = view.passes
    namespace: dict = {"torch": torch}
    exec(compile(source, "<plain>", "exec"), namespace)  # noqa: S102
    assert [w.grad is not None for w in namespace["ws"]] == [True] + [False] * (n - 1)
    dimmed = _dimmed(view, nodes, p.own)
    kinds = Counter(d.kind for d in dimmed)
    # each unreached graph: SumBackward0, MulBackward0, AccumulateGrad and the leaf above it
    assert kinds == {"fn": 2 * (n - 1), "acc": n - 1, "leaf": n - 1}
    assert _dimmed(view, nodes, p.last) == dimmed
    assert _dimmed(view, nodes, p.first) == [] and _dimmed(view, nodes, p.own + 1) == []
    marked = [box for box in nodes if box.kind in ("fn", "acc", "leaf") and tracks.state.get(box.k)]
    assert len(marked) == len(p.names) + 1  # the nodes that ran, and the one leaf they reached
    assert tracks.state[view.graph.pass_k] == [[p.last, p.own, PASS_OVER]]
    # /render.svg dims the same boxes of the drawing it draws (the default one)
    for step in (p.first, p.own):
        want = len(_dimmed(view, view.graph.drawing().nodes, step))
        assert render_svg(view, step, "graph").count('<g opacity="0.38">') == want
    assert want > 0


def test_the_payload_lists_each_pass_once_linear_in_its_steps() -> None:
    source = _code(CASES["two backward calls with retain_graph"])
    view = build_explorer(trace(source), source)
    payload = client_payload(view)["passes"]
    steps = trace_v1(source).steps
    backward = [i for i, s in enumerate(steps) if s.phase == "backward"]
    assert sum(len(p[3]) for p in payload) == len(backward)
    for first, last, own, names in payload:
        assert all(steps[i].phase == "backward" for i in range(first, last + 1))
        assert steps[own].phase == "forward" and own == last + 1 and len(names) == last - first + 1
        assert pass_at(list(view.passes), first).first == first and pass_at(list(view.passes), own) is None


def test_render_svg_and_embed_address_a_backward_step(tmp_path) -> None:  # noqa: ANN001
    source = _code(CASES["two paths into one leaf"])
    view = build_explorer(trace(source), source)
    svg = render_svg(view, 5)  # step 6, node 3 of 5: SinBackward0
    assert "backward · node 3 of 5 · SinBackward0" in svg and "[0.5403 -0.416 -0.99]" in svg
    with TestClient(create_app(Settings(data_dir=tmp_path))) as client:
        image = client.get(f"/render.svg?code={encode_code(source)}&step=6&view=graph")
        assert image.status_code == 200 and "backward · node 3 of 5 · SinBackward0" in image.text
        run = client.post("/embed/run", data={"code": source, "step": "6", "view": "graph"})
        assert run.status_code == 200
        assert "backward · node 3 of 5 · SinBackward0" in run.text and 'data-testid="step-out"' in run.text


def test_the_memory_view_shows_gradient_buffers_as_they_appear_and_grad_filling() -> None:
    """Nothing new is drawn for backward: its gradients are tensors of its steps, and the memory view
    shows every tensor of a step. Held against the trace and torch's own .grad."""
    source = _code(CASES["two paths into one leaf"])
    view = build_explorer(trace(source), source)
    steps = trace_v1(source).steps
    tracks = view.tracks

    def shown(step: int) -> dict[str, str]:
        """tensor -> the text of its storage's cells, for the rows on screen at ``step``."""
        found = {}
        for _, strip in view.memory.strips():
            if not value_at(tracks.vis.get(strip.k, []), step):
                continue
            for row in strip.rows:
                tid = value_at(tracks.ref.get(row.k, []), step)
                if tid is not None:
                    found[tid] = value_at(tracks.text.get(strip.cells_k, []), step) or ""
        return found

    (p,) = view.passes
    for index in range(p.first, p.own + 1):
        step = steps[index]
        for tid in [*step.received, *step.sent]:
            if tid is not None and tid in steps[index].tensors:
                assert tid in shown(index), (index, tid)  # every gradient of the step is drawn
    a = steps[0].variables["a"]
    assert all(steps[i].tensors[a].grad is None for i in range(p.first, p.last))  # .grad comes last
    grad = steps[p.last].tensors[a].grad
    assert grad is not None and grad in shown(p.last)
    cells = shown(p.own)[grad].split()
    want = [grad_text(v, []) for v in (2 + torch.tensor([1., 2., 3.]).cos()).tolist()]
    assert cells == want  # a.grad's cells, as torch computes them
