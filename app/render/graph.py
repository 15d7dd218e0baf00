"""The graph view: the autograd graph of every step, folded where it repeats, laid out by dot.

``GraphBuilder`` is fed the replayed steps (``add_step``, see ``app.render.steps``) and records what
changes (``graph_events``); ``finish`` folds (``graph_fold``), lays out (``layout``) and records every
element's per-step visibility, text and state with ``Tracks.change_*``: time linear in the run's
changes. The result, ``GraphView`` (``graph_view``), holds one ``Drawing`` per mode (all nodes,
repeats folded, modules folded), each made by a ``graph_draw.Drawer``; the page shows the default one
and switches between them without the server.

A drawing covers the steps in *epochs*: a straight-line snippet is one epoch (nothing ever moves); a
loop whose graphs come and go gets a new epoch when much of what was laid out is gone, so each
picture stays tight. An epoch lays out at most ``MAX_UNITS`` boxes; past that it shows the first
ones and says so ("graph too large to lay out: showing …").
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from app.i18n import gettext as _
from app.i18n import number
from app.render.graph_backward import BackwardMarks
from app.render.graph_draw import Drawer
from app.render.graph_events import Events, GraphEvents, saved_state
from app.render.graph_fold import MODE_TITLES, MODES, Folding, fold
from app.render.graph_view import Chip, Drawing, GEdge, GNode, GraphView
from app.render.layout import LayoutCache
from app.render.steps import StepInput
from app.render.tracks import Tracks

__all__ = ["GraphBuilder", "GraphView", "Drawing", "GNode", "GEdge", "Chip", "saved_state"]

# Boxes one drawing may put in the page over all its layouts. A mode past it is not drawn when a more
# folded one is: a training loop's graphs, one per iteration, are a few boxes folded and hundreds
# unfolded, which cost the server their layouts and templates and the browser their parsing and every
# step switch, for a picture no one reads at that size (issue 27: a small CNN, 435 boxes, twice the
# fragment of its folded drawings together).
MAX_DRAWN_BOXES = 300
PANEL_W, PANEL_H = 440, 560  # the graph panel beside the memory view, at 1440×900
FOLD_BELOW = 9 / 12  # the whole drawing fitted to the panel draws 12 px labels under 9 px: fold


class GraphBuilder:
    """``add_step`` for every replayed step, then ``finish(count)`` once."""

    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.observer = GraphEvents()
        self.backward = BackwardMarks(self.observer.events, self.observer._grad_users)
        self.cache = LayoutCache()

    # No collector pause of its own: build_explorer pauses it for the whole replay and the finish.
    def add_step(self, step: StepInput) -> None:
        self.observer.add_step(step)
        self.backward.add_step(step)

    def finish(self, count: int) -> GraphView:
        self.backward.finish(count)
        return self._finish(count)

    def _finish(self, count: int) -> GraphView:
        events = self.observer.events
        tracks = self.tracks
        empty_k = tracks.key(("graph-empty",))
        class_sizes = Counter(v.klass for v in events.vertices.values())
        modules = {v.module for v in events.vertices.values() if v.module is not None}
        modes = ["all"]
        if any(n >= 2 for n in class_sizes.values()):
            modes.append("repeats")
        if modules:
            modes.append("modules")
        drawings = []
        not_drawn: list[tuple[str, str, str]] = []
        extents: dict[str, tuple[float, float]] = {}
        foldings = {mode: fold(events, mode, class_sizes) for mode in MODES if mode in modes}
        for n, (mode, folding) in enumerate(foldings.items()):
            more_folded = n + 1 < len(foldings)  # the last mode is always drawn
            why = _same_as_folded(foldings, mode) if more_folded else None
            drawer = Drawer(tracks, folding, events, count, self.cache)
            if why is None and more_folded and (boxes := drawer.boxes()) > MAX_DRAWN_BOXES:
                why = _("Not drawn: {boxes} boxes over the run, too many for a page; folded, they are "
                        "few").format(boxes=number(boxes))
            if why is not None:
                not_drawn.append((mode, _(MODE_TITLES[mode]), why))
                continue
            drawing, extent = drawer.draw()
            drawings.append(drawing)
            extents[mode] = extent
        _record_empty(tracks, empty_k, events, count)
        pass_k = None
        if events.passes:  # the boxes a pass that just ended did not reach (graph_backward.unreached)
            pass_k = tracks.key(("graph-pass",))
            for step, state in events.passes:
                tracks.change_state(pass_k, step, state or "")
        return GraphView(empty_k, tuple(drawings), _default_mode(extents), _inspector(events, count), pass_k,
                         tuple(not_drawn))


def _same_as_folded(foldings: dict[str, Folding], mode: str) -> str | None:
    """Why the unfolded drawing is not drawn, when it would be the folded one again: no step shows two
    members of one folded box ("×2"), so at every step each folded box is the one box it stands for."""
    if mode != "all" or "repeats" not in foldings:
        return None
    if any(value for unit in foldings["repeats"].units.values() for _, value in unit.count):
        return None
    return _("Not drawn: no step shows two alike boxes, so “Fold repeats” draws the same")


def _default_mode(extents: dict[str, tuple[float, float]]) -> str:
    """Fold by default when the whole drawing, fitted to the panel, would draw labels too small: a
    loop's iterations first, then modules too."""

    def scale(extent: tuple[float, float]) -> float:
        w, h = extent
        return min(PANEL_W / max(w, 1), PANEL_H / max(h, 1), 1.0)

    drawn = [m for m in MODES if m in extents]  # the least folded first ("all" may be too large to draw)
    mode = drawn[0]
    for folded in drawn[1:]:  # fold more while it still draws them too small
        if scale(extents[mode]) < FOLD_BELOW:
            mode = folded
    return mode


def _record_empty(tracks: Tracks, empty_k: int, events: Events, count: int) -> None:
    """The "No tensors yet." note: shown at the steps without any vertex (each history entry of a
    vertex flips it, starting with "shown")."""
    tracks.vis.setdefault(empty_k, [])
    if not count:
        return
    stream = sorted((step, on) for history in events.vis.values() for step, on in history)
    if not stream or stream[0][0] > 0:
        tracks.change_vis(empty_k, 0, True)
    shown = i = 0
    while i < len(stream):
        step = stream[i][0]
        while i < len(stream) and stream[i][0] == step:
            shown += 1 if stream[i][1] else -1
            i += 1
        tracks.change_vis(empty_k, step, shown == 0)


def _inspector(events: Events, count: int) -> dict[str, Any]:
    nodes = {}
    for nid, history in events.node_facts.items():
        runs = [[step, (history[i + 1][0] - 1) if i + 1 < len(history) else count - 1, value]
                for i, (step, value) in enumerate(history)]
        nodes[nid] = [events.node_names.get(nid, ""), events.node_lines.get(nid), runs]
    return {"nodes": nodes, "facts": events.facts}
