"""What the graph view shows during a backward pass, as changes (issue 13).

Fed every replayed step after ``GraphEvents`` (``graph_events``) handled it. In a ``backward`` step
(``app.schema``: ``node`` just ran, it ``received`` gradients and ``sent`` one along each ``next``
edge) it records:

* the node that ran: vertex state ``ran`` at that step, ``reached`` after it;
* every edge that carried a gradient so far: edge state ``grad``, and the gradient's values as the
  edge's text when the tensor is small (≤ ``VALUES_MAX`` elements, cells as the memory view writes
  them), else its shape. A leaf's edge into its ``AccumulateGrad`` carries what was accumulated;
* at the end of the pass, the nodes alive that no gradient reached: state ``unreached`` from the
  pass's last node step (the view dims them and its legend says why).

The marks hold through the line's own step (the one stepping over lands on, so it shows where the
gradient went) and are cleared at the step after. Every mark is recorded once and cleared once, and
finding the unreached nodes looks at the nodes that ran plus at most ``UNREACHED_MAX`` others: the
cost is linear in the pass, not in the graph alive.
"""

from __future__ import annotations

from app.render.fmt import scalar, shape
from app.render.graph_events import Events, record
from app.render.steps import StepInput

VALUES_MAX = 8  # a gradient with at most this many elements is written on its edge
UNREACHED_MAX = 500  # the graph view lays out at most this many boxes (graph.MAX_UNITS)


def grad_text(values: object, dims: list[int]) -> str:
    """``[0.5 -1. 2.]`` for a small gradient (its cells as the memory view writes them), else its shape."""
    numel = 1
    for d in dims:
        numel *= d
    if values is None or numel > VALUES_MAX:
        return shape(dims)
    flat: list = []
    stack = [values]
    while stack:  # nested lists, depth first, left to right
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        else:
            flat.append(item)
    if not dims:
        return scalar(flat[0]) if flat else ""
    return "[" + " ".join(scalar(v) for v in flat) + "]"


class BackwardMarks:
    """``add_step`` after the graph's own, for every step; ``finish(count)`` once."""

    def __init__(self, events: Events, grad_users: dict[str, dict[str, None]],
                 tensor_vertex: dict[str, str]) -> None:
        self.events = events
        self.grad_users = grad_users  # node -> tensors whose grad_fn it is (kept by GraphEvents)
        self.tensor_vertex = tensor_vertex  # tensor -> its out/free vertex now (kept by GraphEvents)
        self.restore: dict[str, str | None] = {}  # a free leaf's own state, under its "unreached"
        self.in_pass = False
        self.ran: set[str] = set()
        self.last_ran: str | None = None  # the vertex of the node that ran at the previous step
        self.last_step = -1
        self.marked_vertices: set[str] = set()
        self.marked_edges: set[tuple[str, str]] = set()
        self.clear_at: int | None = None

    def _vertex(self, key: str, step: int, state: str | None) -> None:
        record(self.events.state.setdefault(key, []), step, state)
        self.marked_vertices.add(key)

    def _edge(self, pair: tuple[str, str], step: int, text: str | None) -> None:
        record(self.events.edge_state.setdefault(pair, []), step, "grad")
        record(self.events.edge_text.setdefault(pair, []), step, text)
        self.marked_edges.add(pair)

    def _text(self, step: StepInput, tid: str | None) -> str | None:
        fact = step.state.tensors.get(tid) if tid is not None else None
        return grad_text(fact.values, fact.shape) if fact is not None else None

    def add_step(self, step: StepInput) -> None:
        index, delta = step.index, step.changes.delta
        if self.clear_at == index:
            self._clear(index)
        if delta.phase == "backward":
            self._ran(step)
        elif self.in_pass:
            self._end(step)
            self.clear_at = index + 1

    def finish(self, count: int) -> None:
        if self.in_pass:  # the run ended inside the pass (an error in backward, a cut run)
            self._end(None)

    def _ran(self, step: StepInput) -> None:
        index, delta, nodes = step.index, step.changes.delta, step.state.nodes
        if not self.in_pass:
            self.in_pass, self.ran, self.last_ran = True, set(), None
        if self.last_ran is not None:
            self._vertex(self.last_ran, index, "reached")
        nid = delta.node
        node = nodes.get(nid) if nid is not None else None
        self.last_step = index
        if node is None or nid is None:
            return
        key = f"n:{nid}"
        self.ran.add(nid)
        self._vertex(key, index, "ran")
        self.last_ran = key
        # An edge may join the same two vertices more than once (c * c): its gradients add up.
        texts: dict[tuple[str, str], list[str]] = {}
        for i, nxt in enumerate(node.next):
            sent = delta.sent[i] if i < len(delta.sent) else None
            if nxt is not None and sent is not None:
                texts.setdefault((f"n:{nxt}", key), []).append(self._text(step, sent) or "")
        received = delta.received[0] if delta.received else None
        if node.variable is not None and received is not None:
            leaf = f"leaf:{nid}"
            texts[(leaf, key)] = [self._text(step, received) or ""]
            self._vertex(leaf, index, "reached")
        if received is not None:  # into the node from the tensor it made (a variable's out box)
            for tid in self.grad_users.get(nid, ()):
                out = f"out:{tid}:{nid}"
                if out in self.events.vertices:
                    texts[(key, out)] = [self._text(step, received) or ""]
        for pair, parts in texts.items():
            self._edge(pair, index, " + ".join(p for p in parts if p) or None)

    def _end(self, step: StepInput | None) -> None:
        """The pass is over: the nodes alive that it never ran, and the leaves outside any graph that
        require grad (no AccumulateGrad: nothing could reach them), are dimmed from its last node step."""
        self.in_pass = False
        if step is None or self.last_step < 0:
            return
        if self.last_ran is not None:
            self._vertex(self.last_ran, step.index, "reached")
        found = 0
        for nid, node in step.state.nodes.items():
            if nid in self.ran:
                continue
            if found >= UNREACHED_MAX:
                break
            found += 1
            self._vertex(f"n:{nid}", self.last_step, "unreached")
            if node.variable is not None and f"leaf:{nid}" in self.events.vertices:
                self._vertex(f"leaf:{nid}", self.last_step, "unreached")
        for tid, key in self.tensor_vertex.items():
            if found >= UNREACHED_MAX:
                break
            fact = step.state.tensors.get(tid)
            if key.startswith("free:") and fact is not None and fact.requires_grad:
                found += 1
                self._dim_free(key)

    def _dim_free(self, key: str) -> None:
        """A free leaf's state says what it is ("leaf"), set by the graph itself, which may have set
        it again at the line's own step already: "unreached" joins it from the pass's last node step."""
        history = self.events.state.setdefault(key, [])
        later = []
        while history and history[-1][0] > self.last_step:
            later.insert(0, history.pop())
        base = history[-1][1] if history else None
        for step, value in [(self.last_step, base), *later]:
            record(history, step, f"{value or ''} unreached".strip())
        self.restore[key] = later[-1][1] if later else base
        self.marked_vertices.add(key)

    def _clear(self, index: int) -> None:
        for key in self.marked_vertices:
            history = self.events.state.setdefault(key, [])
            if key in self.restore and history and history[-1][0] == index:
                del self.restore[key]  # the graph itself set the leaf's state at this step: it stands
                continue
            record(history, index, self.restore.pop(key, None))
        for pair in self.marked_edges:
            record(self.events.edge_state.setdefault(pair, []), index, None)
            record(self.events.edge_text.setdefault(pair, []), index, None)
        self.marked_vertices.clear()
        self.marked_edges.clear()
        self.clear_at = None
