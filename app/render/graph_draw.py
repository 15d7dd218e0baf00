"""One mode's drawing of the graph view (``Drawer``): the steps cut into epochs, each epoch's boxes
sized, laid out once by ``app.render.layout`` and placed, and every box, chip and edge given the
tracks of its visibility, text and state within its epoch. ``app.render.graph.GraphBuilder`` makes one
per mode it draws."""

from __future__ import annotations

from bisect import bisect_right
from typing import Any

from app.i18n import gettext as _
from app.i18n import number
from app.render.graph_events import Events, History
from app.render.graph_fold import MODE_TITLES, Folding, Unit
from app.render.graph_view import Chip, Drawing, GEdge, GNode
from app.render.layout import Box, Layout, LayoutCache, lay_out
from app.render.tracks import Tracks

CHAR_W = 7.3  # monospace 12px
CHIP_CHAR_W = 6.7  # monospace 11px
NODE_H = 30
CHIP_H = 18
PAD_X = 12
LABEL_MAX = 28
CHIP_MAX = 22
MAX_UNITS = 500  # boxes in one layout; past that, a partial view that says so
EPOCH_HIDDEN_SHARE = 0.3  # a new layout when this share of the laid-out boxes is gone ...
EPOCH_HIDDEN_MIN = 3  # ... and at least this many
EPOCH_OVER_SHARE = 0.1  # past MAX_UNITS, a new layout once this share is gone
MARGIN = 16


# ---------- sizes -----------------------------------------------------------------------------

def _chip_text_w(unit: Unit, name: str) -> float:
    return max(min(unit.chip_len.get(name, 0), CHIP_MAX), len(name)) * CHIP_CHAR_W + 12


def unit_size(unit: Unit) -> tuple[float, float, list[float]]:
    label = max(len(unit.title), min(unit.label_len, LABEL_MAX), 3)
    if unit.folded:
        label += 6  # " ×9999"
    label_w = label * CHAR_W + 2 * PAD_X
    chip_ws = [_chip_text_w(unit, name) for name in unit.chips]
    chips_w = sum(chip_ws) + 6 * (len(chip_ws) - 1) + 16 if chip_ws else 0
    height = NODE_H + (CHIP_H + 6 if chip_ws else 0)
    return max(label_w, chips_w), height, chip_ws


# ---------- histories within an epoch -----------------------------------------------------------

def _at(history: History, step: int) -> Any:
    i = bisect_right(history, (step, _TOP)) - 1
    return history[i][1] if i >= 0 else None


class _Top:
    """Sorts after any value, so ``(step, _TOP)`` bisects past every change at ``step``."""

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return True


_TOP = _Top()


def _within(history: History, first: int, last: int) -> list[tuple[int, Any]]:
    """The history's value at ``first`` and its changes up to ``last``."""
    out = [(first, _at(history, first))]
    i = bisect_right(history, (first, _TOP))
    while i < len(history) and history[i][0] <= last:
        out.append(history[i])
        i += 1
    return out


def _shown_span(history: History, first: int, last: int) -> tuple[int, int] | None:
    """First and last step in [first, last] at which the element is shown."""
    changes = _within(history, first, last)
    start = end = None
    for n, (step, on) in enumerate(changes):
        if on:
            start = step if start is None else start
            until = changes[n + 1][0] - 1 if n + 1 < len(changes) else last
            end = until
    return None if start is None else (start, end)


def _quick_note(layout: Layout) -> str | None:
    """What the reader is told when parts of an epoch were placed quickly instead of by dot."""
    if layout.dense:
        return _("Parts of this graph too dense to lay out tidily are drawn in plain layers.")
    if layout.quick:
        return _("The server was busy, so parts of this graph are drawn in plain layers instead of the "
                 "tidy layout.")
    return None


# ---------- one mode's drawing -------------------------------------------------------------------

class Drawer:
    def __init__(self, tracks: Tracks, folding: Folding, events: Events, count: int, cache: LayoutCache):
        self.tracks, self.folding, self.events, self.count, self.cache = tracks, folding, events, count, cache
        self.mode = folding.mode
        self.nodes: list[GNode] = []
        self.edges: list[GEdge] = []
        self.epochs: list[tuple[int, int, list[str]]] | None = None

    def boxes(self) -> int:
        """The boxes this drawing holds over all its layouts (each lays out at most MAX_UNITS)."""
        self.epochs = self._epochs()
        return sum(len(keys) for _, _, keys in self.epochs)

    def draw(self) -> tuple[Drawing, tuple[float, float]]:
        tracks, mode = self.tracks, self.mode
        camera_k = tracks.key(("graph-camera", mode))
        note_k = tracks.key(("graph-note", mode))
        largest = (0.0, 0.0)
        epochs = self.epochs if self.epochs is not None else self._epochs()
        for epoch, (first, last, keys) in enumerate(epochs):
            extent, omitted, placed = self._draw_epoch(epoch, first, last, keys)
            x0, y0, x1, y1 = extent
            largest = (max(largest[0], x1 - x0), max(largest[1], y1 - y0))
            tracks.change_text(camera_k, first, f"{x0:.0f} {y0:.0f} {x1 - x0:.0f} {y1 - y0:.0f}")
            note = None
            if omitted:
                shown = len(keys) - omitted
                note = (_("Graph too large to lay out: showing the first {shown} of its {total} boxes. Fold "
                          "repeats to see all of it.") if mode == "all" else _(
                    "Graph too large to lay out: showing the first {shown} of its {total} boxes.")
                ).format(shown=number(shown), total=number(len(keys)))
            plain = _quick_note(placed)
            if plain:
                note = f"{note} {plain}" if note else plain
            tracks.change_text(note_k, first, note)
        drawing = Drawing(mode, _(MODE_TITLES[mode]), camera_k, note_k, tuple(self.nodes), tuple(self.edges),
                          len(epochs))
        return drawing, largest

    def _epochs(self) -> list[tuple[int, int, list[str]]]:
        """Cut the steps into ranges laid out together: a new one once much of the union is gone."""
        stream = sorted((step, n, key, on) for n, (key, unit) in enumerate(self.folding.units.items())
                        for step, on in unit.vis)
        epochs: list[tuple[int, int, list[str]]] = []
        visible: set[str] = set()
        union: dict[str, None] = {}
        start = 0
        i = 0
        while i < len(stream):
            step = stream[i][0]
            came = []
            while i < len(stream) and stream[i][0] == step:
                _, _, key, on = stream[i]
                if on:
                    visible.add(key)
                    came.append(key)
                else:
                    visible.discard(key)
                i += 1
            grown = len(union) + sum(1 for k in came if k not in union)
            hidden = grown - len(visible)
            cut = union and ((hidden >= EPOCH_HIDDEN_MIN and hidden > EPOCH_HIDDEN_SHARE * grown)
                             or (grown > MAX_UNITS and hidden > EPOCH_OVER_SHARE * grown))
            if cut:
                epochs.append((start, step - 1, list(union)))
                start, union = step, dict.fromkeys(sorted(visible, key=self._order))
            else:
                union.update(dict.fromkeys(came))
        if union:
            epochs.append((start, self.count - 1, list(union)))
        return epochs

    def _order(self, key: str) -> tuple[int, int]:
        unit = self.folding.units[key]
        return unit.first, self.events.vertices[unit.members[0]].seq

    def _draw_epoch(self, epoch: int, first: int, last: int, keys: list[str]):
        units = self.folding.units
        spans = {}
        for key in keys:
            span = _shown_span(units[key].vis, first, last)
            if span is not None:
                spans[key] = span
        order = sorted(spans, key=lambda k: (spans[k][0], self._order(k)))
        omitted = max(len(order) - MAX_UNITS, 0)
        order = order[:MAX_UNITS]
        included = set(order)
        sizes = {key: unit_size(units[key]) for key in order}
        boxes = [Box(key, sizes[key][0], sizes[key][1], *spans[key]) for key in order]
        pairs = []
        for pair, edge in self.folding.edges.items():
            if pair[0] in included and pair[1] in included and _shown_span(edge.vis, first, last):
                pairs.append(pair)
        loose = {pair for pair in pairs if self.folding.edges[pair].back}
        layout = lay_out(boxes, pairs, self.cache, loose)
        placed = [self._node(units[key], epoch, first, last, layout.centres[key], sizes[key])
                  for key in order]
        self.nodes += sorted(placed, key=lambda n: (n.y, n.x))  # reading order: the Tab order
        for pair in pairs:
            self._edge(pair, epoch, first, last, layout.routes.get(pair))
        x0, y0, x1, y1 = layout.extent
        extent = (x0 - MARGIN, y0 - MARGIN, x1 + MARGIN, y1 + MARGIN)
        return extent, omitted, layout

    def _track(self, k: int, history: History, first: int, last: int, kind: str) -> None:
        tracks = self.tracks
        if kind == "vis":
            for step, value in _within(history, first, last):
                tracks.change_vis(k, step, bool(value))
            if last + 1 < self.count:
                tracks.change_vis(k, last + 1, False)
        elif kind == "state":
            for step, value in _within(history, first, last):
                tracks.change_state(k, step, value or "")
        else:
            for step, value in _within(history, first, last):
                tracks.change_text(k, step, value)

    def _node(self, unit: Unit, epoch: int, first: int, last: int, centre, size) -> GNode:
        tracks, mode = self.tracks, self.mode
        ident = ("g", mode, unit.key, epoch)
        k = tracks.key(ident)
        label_k = tracks.key((*ident, "label"))
        self._track(k, unit.vis, first, last, "vis")
        self._track(k, unit.state, first, last, "state")
        self._track(label_k, unit.text, first, last, "text")
        count_k = rep_k = None
        if unit.folded and unit.kind != "module":
            count_k = tracks.key((*ident, "count"))
            self._track(count_k, unit.count, first, last, "text")
            if unit.kind in ("fn", "acc"):
                rep_k = tracks.key((*ident, "rep"))
                self._track(rep_k, unit.rep, first, last, "text")
        width, height, chip_ws = size
        x, y = centre[0] - width / 2, centre[1] - height / 2
        first_vertex = self.events.vertices[unit.members[0]]
        chips, cx = [], x + 8
        for (name, parts), chip_w in zip(unit.chips.items(), chip_ws, strict=True):
            chip_k = tracks.key((*ident, "chip", name))
            text_k = tracks.key((*ident, "chip", name, "text"))
            self._track(chip_k, parts["vis"], first, last, "vis")
            self._track(chip_k, parts["state"], first, last, "state")
            self._track(text_k, parts["text"], first, last, "text")
            tensor = first_vertex.chips.get(name) if not unit.folded else None
            tip = _("saved tensor {name} of {node}: kept alive for backward").format(
                name=name, node=unit.title)
            chips.append(Chip(chip_k, text_k, name, tensor, round(cx, 1), round(y + NODE_H - 3, 1),
                              round(chip_w, 1), tip))
            cx += chip_w + 6
        single = not unit.folded
        saved = tuple(sorted({t for t in first_vertex.chips.values() if t})) if single else ()
        return GNode(
            k, label_k, count_k, rep_k, unit.key, unit.kind, unit.title,
            first_vertex.tensor if single else None, first_vertex.node if single else None,
            round(x, 1), round(y, 1), round(width, 1), height, tuple(chips), saved,
            unit.klass if unit.folded else (first_vertex.klass if unit.kind != "module" else None),
            unit.folded, _tip(unit, first_vertex.line),
        )

    def _edge(self, pair: tuple[str, str], epoch: int, first: int, last: int, points) -> None:
        edge = self.folding.edges[pair]
        k = self.tracks.key(("e", self.mode, *pair, epoch))
        self._track(k, edge.vis, first, last, "vis")
        text_k = None
        if edge.state:  # a backward pass sent a gradient along it
            self._track(k, edge.state, first, last, "state")
            text_k = self.tracks.key(("e", self.mode, *pair, epoch, "grad"))
            self._track(text_k, edge.text, first, last, "text")
        if not points:
            return
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        mid = points[len(points) // 2]
        self.edges.append(GEdge(k, edge.kind, _path(points), edge.count, (round(mid[0], 1), round(mid[1], 1)),
                                (min(xs), min(ys), max(xs), max(ys)), text_k, points[-1][0] < points[0][0]))


def _path(points: list[tuple[float, float]]) -> str:
    """An SVG path through Bézier control points p0 (c1 c2 p)…; a bare polyline otherwise."""
    (x0, y0), rest = points[0], points[1:]
    parts = [f"M{x0:.1f},{y0:.1f}"]
    if len(rest) % 3 == 0:
        for i in range(0, len(rest), 3):
            (ax, ay), (bx, by), (cx, cy) = rest[i:i + 3]
            parts.append(f"C{ax:.1f},{ay:.1f} {bx:.1f},{by:.1f} {cx:.1f},{cy:.1f}")
    else:
        parts += [f"L{x:.1f},{y:.1f}" for x, y in rest]
    return " ".join(parts)


def _tip(unit: Unit, line: int) -> str:
    """The tooltip (<title>) of a box: what kind of thing it is and where it came from."""
    n = len(unit.members)
    if unit.kind == "module":
        return _("module {name}: its parameters and the operations that apply them ({n} boxes)").format(
            name=unit.title, n=n)
    alike = _(" · {n} alike folded into one box (e.g. a loop's iterations); the count says how many "
              "are alive").format(n=number(n)) if unit.folded else ""
    where = _(" · made by line {line}").format(line=line) if line else ""
    templates = {
        "fn": _("{name}: a backward node (grad_fn){where}"),
        "acc": _("AccumulateGrad: adds the gradient into the leaf above it{where}"),
        "leaf": _("a leaf tensor that requires grad: backward fills its .grad"),
        "out": _("a tensor bound to a variable; its grad_fn is the node above{where}"),
        "free": _("a tensor outside any graph{where}"),
    }
    text = templates[unit.kind].format(name=unit.title, where=where) if unit.kind in templates else unit.title
    return text + alike
