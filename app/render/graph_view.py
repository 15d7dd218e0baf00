"""The graph view's model: what ``app.render.graph.GraphBuilder`` hands the page's ``_graph.html``
and the picture's ``svg_graph``: one ``Drawing`` per mode, its boxes (``GNode``, with their saved
tensors' ``Chip``s) and edges (``GEdge``) placed once per epoch, whose texts, states and visibility
are tracks (``app.render.tracks``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Chip:
    k: int
    text_k: int
    name: str
    tensor: str | None
    x: float
    y: float
    w: float
    tip: str


@dataclass(frozen=True)
class GNode:
    k: int
    label_k: int
    count_k: int | None  # "×57" on a folded box
    rep_k: int | None  # the node id a folded box stands for at each step (for the inspector)
    key: str
    kind: str  # fn | acc | leaf | out | free | module
    title: str
    tensor: str | None
    node: str | None
    x: float  # top-left corner
    y: float
    w: float
    h: float
    chips: tuple[Chip, ...]
    saved_tensors: tuple[str, ...]
    klass: int | None
    folded: bool
    tip: str


@dataclass(frozen=True)
class GEdge:
    k: int
    kind: str  # next | acc | out
    path: str
    count: int
    mid: tuple[float, float]  # where a "×2" label goes
    box: tuple[float, float, float, float]  # the control points' bounds (the curve lies inside)
    text_k: int | None = None  # text track: the gradient it carried in a backward pass
    leftward: bool = False  # it ends left of where it starts: its gradient is written to its left


@dataclass(frozen=True)
class Drawing:
    mode: str
    title: str
    camera_k: int  # text track: "x y w h", the extent of the epoch on screen
    note_k: int  # text track: why part of the graph is not drawn, if it is not
    nodes: tuple[GNode, ...]
    edges: tuple[GEdge, ...]
    layouts: int  # epochs laid out


@dataclass(frozen=True)
class GraphView:
    empty_k: int
    drawings: tuple[Drawing, ...]
    default: str
    inspector: dict[str, Any]  # node facts for the page's inspector (JSON)
    # state track of the graph's container: graph_backward.PASS_OVER while a pass just ended (None: no
    # pass ever did)
    pass_k: int | None = None
    # (mode, its title, why): the modes not drawn — the same picture as a folded one at every step, or
    # too many boxes for a page (MAX_DRAWN_BOXES)
    not_drawn: tuple[tuple[str, str, str], ...] = ()

    def drawing(self, mode: str | None = None) -> Drawing:
        mode = mode or self.default
        return next(d for d in self.drawings if d.mode == mode)

    # The default drawing, for callers that draw one picture (/render.svg, older code).
    @property
    def nodes(self) -> tuple[GNode, ...]:
        return self.drawing().nodes

    @property
    def edges(self) -> tuple[GEdge, ...]:
        return self.drawing().edges

    @property
    def camera_k(self) -> int:
        return self.drawing().camera_k
