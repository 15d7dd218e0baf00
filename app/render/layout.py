"""Positions for the graph view, from grandalf's Sugiyama (layered, "dot"-style) layout.

grandalf lays out each connected component; we only decide where components sit: in rows about as
wide as the panel, and two components that are never on screen at the same step may share the same
place (a training loop's per-iteration graphs replace each other instead of marching off).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout
from grandalf.routing import EdgeViewer

X_SPACE = 28
Y_SPACE = 34
COMPONENT_GAP = 32
ROW_WIDTH = 440  # about the graph panel's width: wider drawings wrap into rows


@dataclass(frozen=True)
class Box:
    key: str
    w: float
    h: float
    first: int  # first and last step at which the box is visible
    last: int


@dataclass(frozen=True)
class Placed:
    x: float  # centre
    y: float
    component: tuple[float, float, float, float]  # the component's x0, y0, x1, y1


class _View:
    def __init__(self, w: float, h: float) -> None:
        self.w, self.h = w, h
        self.xy = (0.0, 0.0)


@dataclass
class _Component:
    keys: list[str]
    centres: dict[str, tuple[float, float]]
    routes: dict[tuple[str, str], list[tuple[float, float]]]
    width: float
    height: float
    first: int
    last: int
    x: float = 0.0
    y: float = 0.0


def _lay_out(component, boxes: dict[str, Box]) -> _Component:
    """Run Sugiyama on one connected component; coordinates relative to its top-left corner."""
    vertices = list(component.sV)
    if len(vertices) == 1:
        box = boxes[vertices[0].data]
        centres = {box.key: (box.w / 2, box.h / 2)}
        return _Component([box.key], centres, {}, box.w, box.h, box.first, box.last)
    layout = SugiyamaLayout(component)
    layout.xspace, layout.yspace = X_SPACE, Y_SPACE
    layout.init_all()
    layout.draw(3)
    x0 = min(v.view.xy[0] - v.view.w / 2 for v in vertices)
    y0 = min(v.view.xy[1] - v.view.h / 2 for v in vertices)
    x1 = max(v.view.xy[0] + v.view.w / 2 for v in vertices)
    y1 = max(v.view.xy[1] + v.view.h / 2 for v in vertices)
    centres = {v.data: (v.view.xy[0] - x0, v.view.xy[1] - y0) for v in vertices}
    routes = {}
    for edge in component.sE:
        src, dst = edge.v[0].data, edge.v[1].data
        points = [(px - x0, py - y0) for px, py in edge.view._pts]
        if len(points) >= 2 and points[0][1] > points[-1][1]:  # grandalf reversed it: put it back
            points.reverse()
        (sx, sy), (dx, dy) = centres[src], centres[dst]
        inner = points[1:-1]
        routes[(src, dst)] = [(sx, sy + boxes[src].h / 2), *inner, (dx, dy - boxes[dst].h / 2)]
    keys = [v.data for v in vertices]
    first = min(boxes[k].first for k in keys)
    last = max(boxes[k].last for k in keys)
    return _Component(keys, centres, routes, x1 - x0, y1 - y0, first, last)


def _pack(components: list[_Component]) -> None:
    """Place components in rows no wider than ``ROW_WIDTH`` (bottom-left first fit).

    Only components that are on screen at the same time (their step ranges overlap) must not
    overlap; the others may share a place, so a loop's graphs replace each other.
    """
    placed: list[_Component] = []
    for comp in sorted(components, key=lambda c: (c.first, c.keys[0])):
        rivals = [p for p in placed if p.first <= comp.last and comp.first <= p.last]
        spots = {(0.0, 0.0)}
        for p in rivals:
            spots.add((p.x + p.width + COMPONENT_GAP, p.y))
            spots.add((0.0, p.y + p.height + COMPONENT_GAP))
        for x, y in sorted(spots, key=lambda spot: (spot[1], spot[0])):
            if x > 0 and x + comp.width > ROW_WIDTH:
                continue
            if not any(_overlap(x, y, comp, p) for p in rivals):
                comp.x, comp.y = x, y
                break
        placed.append(comp)


def _overlap(x: float, y: float, comp: _Component, other: _Component) -> bool:
    gap = COMPONENT_GAP
    return not (x + comp.width + gap <= other.x or other.x + other.width + gap <= x
                or y + comp.height + gap <= other.y or other.y + other.height + gap <= y)


_RECURSION_LIMIT = threading.Lock()


def layout_components(
    boxes: list[Box], edges: list[tuple[str, str]]
) -> tuple[dict[str, Placed], dict[tuple[str, str], list[tuple[float, float]]]]:
    """Centres of every box and edge polylines (bottom of the source to the top of the target)."""
    # grandalf raises the process-wide recursion limit and never lowers it: one layout at a time,
    # and the limit put back whatever happens (issue #10, 8).
    with _RECURSION_LIMIT:
        limit = sys.getrecursionlimit()
        try:
            return _layout_components(boxes, edges)
        finally:
            sys.setrecursionlimit(limit)


def _layout_components(
    boxes: list[Box], edges: list[tuple[str, str]]
) -> tuple[dict[str, Placed], dict[tuple[str, str], list[tuple[float, float]]]]:
    by_key = {b.key: b for b in boxes}
    vertices = {}
    for box in boxes:
        vertex = Vertex(box.key)
        vertex.view = _View(box.w, box.h)
        vertices[box.key] = vertex
    graph_edges = []
    for src, dst in edges:
        edge = Edge(vertices[src], vertices[dst])
        edge.view = EdgeViewer()
        graph_edges.append(edge)
    graph = Graph(list(vertices.values()), graph_edges)
    components = [_lay_out(c, by_key) for c in graph.C]
    _pack(components)
    placed: dict[str, Placed] = {}
    routes: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for comp in components:
        extent = (comp.x, comp.y, comp.x + comp.width, comp.y + comp.height)
        for key, (cx, cy) in comp.centres.items():
            placed[key] = Placed(cx + comp.x, cy + comp.y, extent)
        for pair, points in comp.routes.items():
            routes[pair] = [(px + comp.x, py + comp.y) for px, py in points]
    return placed, routes
