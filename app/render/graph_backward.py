"""What the graph view shows during a backward pass, as changes (issue 13).

Fed every replayed step after ``GraphEvents`` (``graph_events``) handled it. In a ``backward`` step
(``app.schema``: ``node`` just ran, it ``received`` gradients and ``sent`` one along each ``next``
edge) it records:

* the node that ran: vertex state ``ran`` at that step, ``reached`` after it;
* every edge that carried a gradient so far: edge state ``grad``, and the gradient's values as the
  edge's text when the tensor is small (≤ ``VALUES_MAX`` elements, cells as the memory view writes
  them), else its shape. A leaf's edge into its ``AccumulateGrad`` carries what was accumulated;
* the pass is over: state ``PASS_OVER`` on the graph's container (``Events.passes``) from the
  pass's last node step. Then every box of a node, of an AccumulateGrad's leaf and of a free leaf
  that requires grad that carries neither ``ran`` nor ``reached`` is one no gradient reached: the view
  dims it and its legend says why. ``unreached`` is that rule, for /render.svg; the page's graph.css
  spells the same rule as selectors.

The marks hold through the line's own step (the one stepping over lands on, so it shows where the
gradient went) and are cleared at the step after. Every mark is recorded once and cleared once, and
what the pass did not reach costs one state run, however large the graph alive: the cost is linear
in the pass.
"""

from __future__ import annotations

from app.render.fmt import leaves, scalar, shape
from app.render.graph_events import Events, record
from app.render.steps import StepInput

VALUES_MAX = 8  # a gradient with at most this many elements is written on its edge
PASS_OVER = "pass-over"  # the container's state: a pass just ended (its last node step, the line's own)
DIMMED_KINDS = ("fn", "acc", "leaf")  # and a free box whose state says "leaf"; never out: or module boxes


def unreached(kind: str, state: str, container: str) -> bool:
    """Whether a box of ``kind`` in state ``state`` is one the pass that just ended did not reach,
    the graph's container being in state ``container`` (static/graph.css says the same)."""
    if PASS_OVER not in container.split():
        return False
    words = state.split()
    if "ran" in words or "reached" in words:
        return False
    return kind in DIMMED_KINDS or (kind == "free" and "leaf" in words)


def grad_text(values: object, dims: list[int]) -> str:
    """``[0.5 -1. 2.]`` for a small gradient (its cells as the memory view writes them), else its shape."""
    numel = 1
    for d in dims:
        numel *= d
    if values is None or numel > VALUES_MAX:
        return shape(dims)
    flat = leaves(values)
    if not dims:
        return scalar(flat[0]) if flat else ""
    return "[" + " ".join(scalar(v) for v in flat) + "]"


class BackwardMarks:
    """``add_step`` after the graph's own, for every step; ``finish(count)`` once."""

    def __init__(self, events: Events, grad_users: dict[str, dict[str, None]]) -> None:
        self.events = events
        self.grad_users = grad_users  # node -> tensors whose grad_fn it is (kept by GraphEvents)
        self.in_pass = False
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
            self.in_pass, self.last_ran = True, None
        if self.last_ran is not None:
            self._vertex(self.last_ran, index, "reached")
        nid = delta.node
        node = nodes.get(nid) if nid is not None else None
        self.last_step = index
        if node is None or nid is None:
            return
        key = f"n:{nid}"
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
        """The pass is over: from its last node step, what it did not reach is dimmed."""
        self.in_pass = False
        if step is None or self.last_step < 0:
            return
        if self.last_ran is not None:
            self._vertex(self.last_ran, step.index, "reached")
        record(self.events.passes, self.last_step, PASS_OVER)

    def _clear(self, index: int) -> None:
        record(self.events.passes, index, None)
        for key in self.marked_vertices:
            record(self.events.state.setdefault(key, []), index, None)
        for pair in self.marked_edges:
            record(self.events.edge_state.setdefault(pair, []), index, None)
            record(self.events.edge_text.setdefault(pair, []), index, None)
        self.marked_vertices.clear()
        self.marked_edges.clear()
        self.clear_at = None
