"""The graph panel of a step's SVG picture: the laid-out drawing of the page's graph view
(``app.render.graph``), framed on what the step shows, with a backward pass's marks as the page's
``graph.css`` draws them."""

from __future__ import annotations

from app.i18n import gettext as _
from app.render.explorer import ExplorerView
from app.render.graph_backward import unreached
from app.render.graph_view import GNode
from app.render.svg_canvas import HEAD_H, PANEL_PAD, SANS, Canvas, clean, clip, mono_chars, num, panel
from app.render.tracks import Frame

MIN_GRAPH_W = 260


def camera(view: ExplorerView, frame: Frame) -> tuple[float, float, float, float] | None:
    """The box around everything the step draws — boxes, chips and the curves' control points (a
    Bézier lies inside them) — so the picture never draws outside its frame."""
    if frame.shows(view.graph.empty_k):
        return None
    drawing = view.graph.drawing()
    x0 = y0 = float("inf")
    x1 = y1 = float("-inf")
    for node in drawing.nodes:
        if frame.shows(node.k):
            x0, y0 = min(x0, node.x), min(y0, node.y)
            x1, y1 = max(x1, node.x + node.w), max(y1, node.y + node.h)
    for edge in drawing.edges:
        if frame.shows(edge.k):
            bx0, by0, bx1, by1 = edge.box
            label = 36 if edge.count > 1 else 0  # room for a "×2" beside the curve
            x0, y0, x1, y1 = min(x0, bx0), min(y0, by0), max(x1, bx1 + label), max(y1, by1)
    if x0 == float("inf"):
        return None
    pad = 8
    return x0 - pad, y0 - pad, x1 - x0 + 2 * pad, y1 - y0 + 2 * pad


def graph_size(view: ExplorerView, frame: Frame) -> tuple[float, float]:
    cam = camera(view, frame)
    note = _graph_note(view, frame)
    if cam is None:
        return MIN_GRAPH_W, HEAD_H + 40
    return max(cam[2] + 2 * PANEL_PAD, MIN_GRAPH_W), cam[3] + HEAD_H + 2 * 10 + (20 if note else 0)


def _graph_note(view: ExplorerView, frame: Frame) -> str:
    return frame.text(view.graph.drawing().note_k)


GRAD = "#d97706"  # what a backward pass marks: the page's graph.css uses the same


def _node_style(c: dict[str, str], node: GNode, state: str) -> tuple[str, str, float, str | None, str]:
    """(fill, stroke, stroke width, dash, label ink), as the page's stylesheets draw each kind."""
    if node.kind == "leaf" or (node.kind == "free" and "leaf" in state.split()):
        return c["leaf_bg"], c["leaf"], 1.6, None, c["leaf_ink"]
    if node.kind == "out":
        return c["nonleaf_bg"], c["nonleaf"], 1.6, None, c["nonleaf_ink"]
    if node.kind == "free":
        return c["nograd_bg"], c["faint"], 1.3, "4 3", c["nograd"]
    if node.kind == "acc":
        return c["acc"], c["acc_line"], 1.3, None, c["acc_ink"]
    if node.kind == "module":
        return c["module"], c["module_line"], 1.6, None, c["module_ink"]
    return c["fn"], c["fn_line"], 1.3, None, c["ink"]


def draw_graph(cv: Canvas, view: ExplorerView, frame: Frame, x: float, y: float, w: float, h: float) -> None:
    c = cv.c
    panel(cv, x, y, w, h, _("Autograd graph"), _("arrows: data flow"))
    cam = camera(view, frame)
    if cam is None:
        cv.text(x + PANEL_PAD, y + HEAD_H + 24, _("No tensors yet."), 12.5, c["faint"], family=SANS)
        return
    note = _graph_note(view, frame)
    top = y + HEAD_H + 10
    if note:
        shown = clip(note, mono_chars(w - 2 * PANEL_PAD, 11))
        cv.text(x + PANEL_PAD, top + 12, shown, 11, c["saved"], family=SANS)
        top += 20
    x0, y0, cw, _height = cam
    ox = x + (w - cw) / 2 - x0
    oy = top - y0
    drawing = view.graph.drawing()
    cv.raw(f'<g transform="translate({num(ox)},{num(oy)})">')
    for edge in drawing.edges:
        if not frame.shows(edge.k):
            continue
        colour = {"acc": c["leaf"], "out": c["nonleaf"]}.get(edge.kind, c["edge"])
        dash = ' stroke-dasharray="3 3"' if edge.kind in ("acc", "out") else ""
        carried = edge.text_k is not None and "grad" in frame.state(edge.k).split()  # a backward step
        width = "1.4"
        if carried:
            colour, dash, width = GRAD, "", "2.4"
        cv.raw(f'<path d="{clean(edge.path)}" fill="none" stroke="{colour}" stroke-width="{width}"{dash} '
               'marker-end="url(#ax-arrow)"/>')
        if edge.count > 1:
            cv.text(edge.mid[0] + 6, edge.mid[1], f"×{edge.count}", 11, c["muted"], weight=700)
        if carried and edge.text_k is not None and frame.text(edge.text_k):
            gx, gy = edge.mid[0] + (-6 if edge.leftward else 6), edge.mid[1] + (13 if edge.count > 1 else 4)
            cv.text(gx, gy, frame.text(edge.text_k), 10.5, GRAD, weight=600,
                    anchor="end" if edge.leftward else "start")
    container = frame.state(view.graph.pass_k) if view.graph.pass_k is not None else ""
    for node in drawing.nodes:
        if frame.shows(node.k):
            _draw_node(cv, node, frame, container)
    cv.raw("</g>")


def _draw_node(cv: Canvas, node: GNode, frame: Frame, container: str) -> None:
    c = cv.c
    state = frame.state(node.k)
    fill, stroke, width, dash, ink = _node_style(c, node, state)
    # A backward step (app/render/graph_backward.py): the node that ran, those it ran after, the dimmed
    words = state.split()
    if "ran" in words or "reached" in words:
        stroke, width = GRAD, 3.2 if "ran" in words else 1.8
    dimmed = unreached(node.kind, state, container)
    if dimmed:
        cv.raw('<g opacity="0.38">')
    _draw_node_parts(cv, node, frame, fill, stroke, width, dash, ink)
    if dimmed:
        cv.raw("</g>")


def _draw_node_parts(cv: Canvas, node: GNode, frame: Frame, fill: str, stroke: str, width: float,
                     dash: str | None, ink: str) -> None:
    c = cv.c
    if node.folded:  # the stack behind a folded box
        cv.rect(node.x + 4, node.y + 4, node.w, node.h, c["line"], rx=6)
    tensor_kind = node.kind in ("leaf", "out", "free")
    cv.rect(node.x, node.y, node.w, node.h, fill, stroke, 15 if tensor_kind else 6, width, dash)
    label = frame.text(node.label_k) if tensor_kind else node.title
    weight = None if node.kind == "acc" else 600
    count = frame.text(node.count_k) if node.count_k is not None else ""
    centre = node.x + node.w / 2 - (20 if node.count_k is not None else 0)
    cv.text(centre, node.y + 19, label, 12, ink, weight=weight, anchor="middle")
    if count:
        cv.text(node.x + node.w - 8, node.y + 19, count, 12, c["accent"], weight=700, anchor="end")
    for chip in node.chips:
        if not frame.shows(chip.k):
            continue
        state = frame.state(chip.k).split()
        if "freed" in state:
            colours = (c["freed"], c["freed_line"], c["faint"], "3 2", 1.1)
        elif "modified" in state:
            colours = (c["modified"], c["error"], c["error_ink"], None, 1.6)
        else:
            colours = (c["saved_bg"], c["saved"], c["saved_ink"], None, 1.1)
        chip_fill, chip_line, chip_ink, chip_dash, chip_width = colours
        cv.rect(chip.x, chip.y, chip.w, 18, chip_fill, chip_line, 9, chip_width, chip_dash)
        cv.text(chip.x + chip.w / 2, chip.y + 13, frame.text(chip.text_k), 11, chip_ink, anchor="middle",
                weight=700 if "modified" in state else None, strike="freed" in state)

