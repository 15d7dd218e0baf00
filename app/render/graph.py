"""The graph view: the autograd graph of every step, laid out once so nodes keep their places.

Vertices:

* ``fn``: a ``grad_fn`` node by name, with its saved tensors as chips inside it;
* ``acc``: an ``AccumulateGrad`` node; ``leaf``: the leaf tensor it accumulates into (above it);
* ``out``: a named tensor whose ``grad_fn`` is a node (below that node);
* ``free``: a named tensor outside any graph (no ``grad_fn``, no ``AccumulateGrad`` yet):
  a leaf that requires grad, or a no-grad tensor.

Edges follow ``next_functions`` and point the way data flowed forward (inputs above, outputs
below); gradients flow back against them.

The layout covers the union of all steps, cut into *epochs*: a straight-line snippet is one epoch
(nothing ever moves); a loop whose graphs come and go gets a new epoch when much of what was laid
out is gone, so each picture stays tight and readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.render.layout import Box, Placed, layout_components
from app.render.names import clip, display_name, is_accumulate, short_node_name
from app.render.tracks import Tracks
from app.schema import NodeFact, RunResult, Step

CHAR_W = 7.3  # monospace 12px
CHIP_CHAR_W = 6.7  # monospace 11px
NODE_H = 30
CHIP_H = 18
PAD_X = 12
LABEL_MAX = 28
CHIP_MAX = 22
EPOCH_HIDDEN_SHARE = 0.3  # a new layout when this share of the laid-out vertices is gone ...
EPOCH_HIDDEN_MIN = 3  # ... and at least this many
EPOCH_MAX = 160  # vertices in one layout, whatever the steps show

SAVED_FREED = "Trying to backward through the graph a second time"


@dataclass(frozen=True)
class Chip:
    k: int
    text_k: int
    name: str
    tensor: str | None
    x: float
    y: float
    w: float


@dataclass(frozen=True)
class GNode:
    k: int
    label_k: int
    key: str
    kind: str  # fn | acc | leaf | out | free
    title: str
    tensor: str | None
    node: str | None
    x: float  # top-left corner
    y: float
    w: float
    h: float
    chips: tuple[Chip, ...]
    saved_tensors: tuple[str, ...]


@dataclass(frozen=True)
class GEdge:
    k: int
    kind: str  # next | acc | out
    path: str
    count: int
    mid: tuple[float, float]  # where a "×2" label goes


@dataclass(frozen=True)
class GraphView:
    camera_k: int
    empty_k: int
    nodes: tuple[GNode, ...]
    edges: tuple[GEdge, ...]


def saved_state(node: NodeFact, name: str) -> str:
    error = node.saved_errors.get(name)
    if error is None:
        return "" if node.saved.get(name) is not None else "freed"
    return "freed" if error.startswith(SAVED_FREED) else "modified"


@dataclass
class _Vertex:
    key: str
    kind: str
    title: str = ""
    tensor: str | None = None
    node: str | None = None
    chips: dict[str, str | None] = field(default_factory=dict)  # saved name -> tensor id
    saved_tensors: set[str] = field(default_factory=set)
    label_len: int = 0
    chip_len: dict[str, int] = field(default_factory=dict)


@dataclass
class _Seen:
    """What one step shows: vertex -> (label, state); chip -> (text, state); edge -> count."""

    vertices: dict[str, tuple[str, str]] = field(default_factory=dict)
    chips: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    edges: dict[tuple[str, str], int] = field(default_factory=dict)


class _Observer:
    """First pass: what every step shows, independent of layout."""

    def __init__(self) -> None:
        self.vertices: dict[str, _Vertex] = {}
        self.steps: list[_Seen] = []

    def _see(self, seen: _Seen, key: str, kind: str, label: str = "", state: str = "", **info) -> _Vertex:
        vertex = self.vertices.get(key)
        if vertex is None:
            vertex = self.vertices[key] = _Vertex(key, kind, **info)
        vertex.label_len = max(vertex.label_len, len(label))
        seen.vertices[key] = (label, state)
        return vertex

    def add_step(self, step: Step, names: dict, holders: dict) -> None:
        seen = _Seen()
        in_graph: set[str] = set()
        for nid, node in step.nodes.items():
            self._function(seen, nid, node, step, names, holders, in_graph)
        for tid in dict.fromkeys(step.variables.values()):
            fact = step.tensors.get(tid)
            if fact is None or tid in in_graph:
                continue
            label = clip(display_name(tid, names, holders), LABEL_MAX)
            if fact.grad_fn is not None and fact.grad_fn in step.nodes:
                key = f"out:{tid}:{fact.grad_fn}"
                self._see(seen, key, "out", label, tensor=tid)
                seen.edges[(f"n:{fact.grad_fn}", key)] = 1
            else:
                # the same box turns from grey to blue when requires_grad_() is called on it
                state = "leaf" if fact.requires_grad else "nograd"
                self._see(seen, f"free:{tid}", "free", label, state, tensor=tid)
        self.steps.append(seen)

    def _function(self, seen: _Seen, nid: str, node: NodeFact, step: Step, names: dict, holders: dict,
                  in_graph: set[str]) -> None:
        kind = "acc" if is_accumulate(node) else "fn"
        key = f"n:{nid}"
        vertex = self._see(seen, key, kind, node=nid, title=short_node_name(node.name))
        for nxt in node.next:
            if nxt is not None and nxt in step.nodes:
                pair = (f"n:{nxt}", key)
                seen.edges[pair] = seen.edges.get(pair, 0) + 1
        if node.variable is not None and node.variable in step.tensors:
            tid = node.variable
            in_graph.add(tid)
            label = clip(display_name(tid, names, holders), LABEL_MAX)
            self._see(seen, f"leaf:{nid}", "leaf", label, tensor=tid)
            seen.edges[(f"leaf:{nid}", key)] = 1
        for name in dict.fromkeys([*node.saved, *node.saved_errors]):
            tid = node.saved.get(name)
            vertex.chips[name] = vertex.chips.get(name) or tid
            if tid is not None:
                vertex.saved_tensors.add(tid)
            text = clip(name if tid is None or tid not in names else f"{name}={names[tid][0]}", CHIP_MAX)
            vertex.chip_len[name] = max(vertex.chip_len.get(name, 0), len(text))
            seen.chips[(key, name)] = (text, saved_state(node, name))


def _epochs(steps: list[_Seen]) -> list[tuple[int, int]]:
    """Cut the steps into ranges laid out together: a new range once much of the union is gone.

    Straight-line code only adds vertices, so it is one range and nothing ever moves; a loop whose
    graphs are freed each iteration gets a fresh layout when the freed ones would leave holes.
    """
    epochs: list[tuple[int, int]] = []
    start, union = 0, set()
    for index, seen in enumerate(steps):
        keys = set(seen.vertices)
        grown = union | keys
        hidden = len(grown - keys)
        if union and ((hidden >= EPOCH_HIDDEN_MIN and hidden > EPOCH_HIDDEN_SHARE * len(grown))
                      or len(grown) > EPOCH_MAX):
            epochs.append((start, index - 1))
            start, grown = index, keys
        union = grown
    if steps:
        epochs.append((start, len(steps) - 1))
    return epochs


def _size(vertex: _Vertex) -> tuple[float, float, list[float]]:
    label_w = max(len(vertex.title), vertex.label_len, 3) * CHAR_W + 2 * PAD_X
    chip_ws = [max(vertex.chip_len.get(n, 0), len(n)) * CHIP_CHAR_W + 12 for n in vertex.chips]
    chips_w = sum(chip_ws) + 6 * (len(chip_ws) - 1) + 16 if chip_ws else 0
    height = NODE_H + (CHIP_H + 6 if chip_ws else 0)
    return max(label_w, chips_w), height, chip_ws


def _path(points: list[tuple[float, float]]) -> str:
    """A smooth SVG path through the layout's polyline (vertical tangents at every bend)."""
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    for x1, y1 in rest:
        mid = (y0 + y1) / 2
        parts.append(f"C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1:.1f}")
        x0, y0 = x1, y1
    return " ".join(parts)


def _middle(points: list[tuple[float, float]]) -> tuple[float, float]:
    if len(points) % 2:
        x, y = points[len(points) // 2]
    else:
        (ax, ay), (bx, by) = points[len(points) // 2 - 1], points[len(points) // 2]
        x, y = (ax + bx) / 2, (ay + by) / 2
    return round(x, 1), round(y, 1)


class _EpochDrawer:
    """Second pass: keys, tracks and positions for the vertices and edges of one epoch."""

    def __init__(self, observer: _Observer, tracks: Tracks) -> None:
        self.observer = observer
        self.tracks = tracks
        self.nodes: list[GNode] = []
        self.edges: list[GEdge] = []

    def draw(self, epoch: int, first: int, last: int) -> dict[str, Placed]:
        tracks, steps = self.tracks, self.observer.steps
        lifetimes: dict[str, list[int]] = {}
        edge_counts: dict[tuple[str, str], int] = {}
        for index in range(first, last + 1):
            seen = steps[index]
            for key, (label, state) in seen.vertices.items():
                k = tracks.key(("g", key, epoch))
                tracks.show(k, index)
                tracks.set_state(k, index, state)
                if label:
                    tracks.set_text(tracks.key(("g", key, epoch, "label")), index, label)
                span = lifetimes.setdefault(key, [index, index])
                span[1] = index
            for (key, name), (text, state) in seen.chips.items():
                k = tracks.key(("chip", key, name, epoch))
                tracks.show(k, index)
                tracks.set_text(tracks.key(("chip", key, name, epoch, "text")), index, text)
                tracks.set_state(k, index, state)
            for pair, count in seen.edges.items():
                tracks.show(tracks.key(("e", *pair, epoch)), index)
                edge_counts[pair] = max(edge_counts.get(pair, 0), count)
        sizes = {key: _size(self.observer.vertices[key]) for key in lifetimes}
        boxes = [Box(key, sizes[key][0], sizes[key][1], a, b) for key, (a, b) in lifetimes.items()]
        placed, routes = layout_components(boxes, list(edge_counts))
        for key in lifetimes:
            self.nodes.append(self._node(self.observer.vertices[key], epoch, placed[key], sizes[key]))
        for pair, count in edge_counts.items():
            kind = "acc" if pair[0].startswith("leaf:") else "out" if pair[1].startswith("out:") else "next"
            points = routes[pair]
            k = tracks.key(("e", *pair, epoch))
            self.edges.append(GEdge(k, kind, _path(points), count, _middle(points)))
        return placed

    def _node(self, vertex: _Vertex, epoch: int, placed: Placed, size: tuple) -> GNode:
        width, height, chip_ws = size
        x, y = placed.x - width / 2, placed.y - height / 2
        chips, cx = [], x + 8
        for (name, tid), chip_w in zip(vertex.chips.items(), chip_ws, strict=True):
            k = self.tracks.key(("chip", vertex.key, name, epoch))
            text_k = self.tracks.key(("chip", vertex.key, name, epoch, "text"))
            chips.append(Chip(k, text_k, name, tid, round(cx, 1), round(y + NODE_H - 3, 1), round(chip_w, 1)))
            cx += chip_w + 6
        return GNode(
            self.tracks.key(("g", vertex.key, epoch)), self.tracks.key(("g", vertex.key, epoch, "label")),
            vertex.key, vertex.kind, vertex.title, vertex.tensor, vertex.node, round(x, 1), round(y, 1),
            round(width, 1), height, tuple(chips), tuple(sorted(vertex.saved_tensors)),
        )


def build_graph(result: RunResult, tracks: Tracks, names: list[dict], holders: list[dict]) -> GraphView:
    observer = _Observer()
    for index, step in enumerate(result.steps):
        observer.add_step(step, names[index], holders[index])
    drawer = _EpochDrawer(observer, tracks)
    camera_k = tracks.key(("graph-camera",))
    empty_k = tracks.key(("graph-empty",))
    for epoch, (first, last) in enumerate(_epochs(observer.steps)):
        placed = drawer.draw(epoch, first, last)
        for index in range(first, last + 1):
            _camera(tracks, observer.steps[index], placed, camera_k, empty_k, index)
    tracks.vis.setdefault(empty_k, [])  # shown only at steps without any vertex
    return GraphView(camera_k, empty_k, tuple(drawer.nodes), tuple(drawer.edges))


def _camera(tracks: Tracks, seen: _Seen, placed: dict[str, Placed], camera_k: int, empty_k: int,
            index: int) -> None:
    """The part of the drawing a step shows: everything its epoch ever draws, so nothing moves.

    (Components that never coexist share space, so an epoch's extent stays close to a step's.)
    """
    if not seen.vertices:
        tracks.show(empty_k, index)
        return
    extents = {p.component for p in placed.values()}
    x0 = min(e[0] for e in extents) - 16
    y0 = min(e[1] for e in extents) - 16
    x1 = max(e[2] for e in extents) + 16
    y1 = max(e[3] for e in extents) + 16
    tracks.set_text(camera_k, index, f"{x0:.0f} {y0:.0f} {x1 - x0:.0f} {y1 - y0:.0f}")
