"""One step of a run as a standalone SVG image, for places where an iframe cannot go (a README).

Pure: an ``ExplorerView`` and a step in, SVG text out, drawn from the same view model as the page
(``frame_at(view, step)``), so the image and the page agree. The image is self-contained for
``<img>``: no scripts, no styles that load anything, no links, no external references (the one
``url(#…)`` is the arrowhead marker inside the file), fonts are generic families, and every user
string (names, prints, error messages) is escaped and stripped of characters XML forbids.

Text cannot be measured in an ``<img>``, so widths are estimated from the monospace advance
(0.6 em), as the graph layout itself does (``app.render.graph.CHAR_W``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from html import escape

from app.budget import current_budget
from app.i18n import gettext as _
from app.render.explorer import ExplorerView, phase_text, step_label
from app.render.graph import GNode
from app.render.graph_backward import unreached
from app.render.grid import Grid
from app.render.memory import Family, Row, Strip
from app.render.tracks import Frame

MONO = "monospace"
SANS = "sans-serif"
PAD = 16
GAP = 12
PANEL_PAD = 14
HEAD_H = 34  # a panel's title bar
LABEL_W = 150  # memory: the label column
CELL = 42
CELL_GAP = 3
CELLS = 6  # per line, as on the page
CELL_H = 34
ROW_H = 26
MEMORY_W = LABEL_W + CELLS * (CELL + CELL_GAP) - CELL_GAP + 16 + 2 * PANEL_PAD
# A 2-D tensor's grid under its strip (app.render.grid decides which cells; this only draws them).
GRID_CELL = 40
GRID_GAP = 3
GRID_H = 30  # a cell with a value above its "@n"
GRID_ADDR_H = 20  # a cell with only its "@n" (a storage too big to read)
GRID_HEAD_W = 24  # the row numbers' column
GRID_CAPTION = 18  # a caption line
MIN_GRAPH_W = 260
OUTPUT_LINES = 6
MIN_WIDTH = 560

# Characters XML 1.0 does not allow even escaped (control characters, lone surrogates, U+FFFE/F).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

LIGHT = {
    "bg": "#f6f7f9", "panel": "#ffffff", "ink": "#1f2430", "muted": "#6b7280", "faint": "#9aa1ad",
    "line": "#e4e7ec", "line_strong": "#cfd4dc", "accent": "#4f46e5", "head": "#374151",
    "leaf": "#2563eb", "leaf_bg": "#dbe8ff", "leaf_bg2": "#c5d8fd", "leaf_ink": "#1e40af",
    "nonleaf": "#0f8a5f", "nonleaf_bg": "#d6f3e6", "nonleaf_bg2": "#bfead7", "nonleaf_ink": "#065f46",
    "saved": "#c2410c", "saved_bg": "#ffe8d2", "saved_bg2": "#fed6b0", "saved_ink": "#9a3412",
    "nograd": "#525b68", "nograd_bg": "#eceef2", "nograd_bg2": "#dde1e7",
    "error": "#dc2626", "error_bg": "#fef2f2", "error_line": "#fecaca", "error_ink": "#991b1b",
    "changed": "#fde68a", "cell": "#ffffff", "strip": "#fcfcfd", "strip_graph": "#fffaf5",
    "strip_graph_line": "#f7d9bd", "sid": "#4b5563", "fn": "#ffffff", "fn_line": "#6b7280",
    "acc": "#f1f5fb", "acc_line": "#8b9bb4", "acc_ink": "#475569", "edge": "#9aa3b2",
    "freed": "#f3f4f6", "freed_line": "#c0c6d0", "modified": "#fee2e2", "bin0": "#f1f3f6",
    "code_bg": "#eef0ff", "module": "#f5f3ff", "module_line": "#7c3aed", "module_ink": "#5b21b6",
}
DARK = {
    "bg": "#0f131a", "panel": "#171c25", "ink": "#e6e9ef", "muted": "#9aa3b2", "faint": "#6b7484",
    "line": "#2a3140", "line_strong": "#3a4253", "accent": "#8b85ff", "head": "#c9ceda",
    "leaf": "#6ea2ff", "leaf_bg": "#1c2d4d", "leaf_bg2": "#233860", "leaf_ink": "#a9c6ff",
    "nonleaf": "#3ccf95", "nonleaf_bg": "#133a2c", "nonleaf_bg2": "#184836", "nonleaf_ink": "#8ee6c0",
    "saved": "#fb8c4a", "saved_bg": "#43261a", "saved_bg2": "#553020", "saved_ink": "#ffc29c",
    "nograd": "#aab2c0", "nograd_bg": "#252b36", "nograd_bg2": "#2e3542",
    "error": "#f87171", "error_bg": "#2a1618", "error_line": "#5c2427", "error_ink": "#fecaca",
    "changed": "#6b5510", "cell": "#1d2330", "strip": "#1a2029", "strip_graph": "#221c19",
    "strip_graph_line": "#4d3323", "sid": "#4b5563", "fn": "#1d2330", "fn_line": "#8a93a3",
    "acc": "#1b2433", "acc_line": "#56657e", "acc_ink": "#b4c0d4", "edge": "#5d6778",
    "freed": "#222833", "freed_line": "#444c5c", "modified": "#3d1a1d", "bin0": "#232935",
    "code_bg": "#232645", "module": "#241d3a", "module_line": "#a78bfa", "module_ink": "#ddd6fe",
}
THEMES = {"light": LIGHT, "dark": DARK}


def clean(text: str) -> str:
    """Escaped for XML text and attribute values; forbidden characters become U+FFFD."""
    return escape(_NOT_XML.sub("\ufffd", text), quote=True)


def width_units(text: str) -> int:
    """How many monospace advances ``text`` takes: a wide character (Chinese) counts two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _fit(text: str, units: int) -> int:
    """How many of ``text``'s characters fit in ``units`` advances."""
    used = 0
    for i, ch in enumerate(text):
        used += 2 if unicodedata.east_asian_width(ch) in "WF" else 1
        if used > units:
            return i
    return len(text)


def clip(text: str, chars: int) -> str:
    text = text.replace("\t", "    ")
    return text if width_units(text) <= chars else text[: _fit(text, max(chars - 1, 0))] + "…"


def mono_chars(width: float, size: float) -> int:
    """How many monospace characters of ``size`` px fit in ``width`` px."""
    return max(int(width / (0.6 * size)), 1)


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


@dataclass
class Canvas:
    """SVG elements in drawing order, with the theme's colours at hand."""

    c: dict[str, str]
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str | None = None,
             rx: float = 0, width: float = 1, dash: str | None = None, opacity: float | None = None) -> None:
        extra = f' stroke="{stroke}" stroke-width="{_n(width)}"' if stroke else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' fill-opacity="{opacity}"' if opacity is not None else ""
        extra += f' rx="{_n(rx)}"' if rx else ""
        box = f'x="{_n(x)}" y="{_n(y)}" width="{_n(w)}" height="{_n(h)}"'
        self.parts.append(f'<rect {box} fill="{fill}"{extra}/>')

    def text(self, x: float, y: float, text: str, size: float = 12, fill: str | None = None, *,
             family: str = MONO, weight: int | None = None, anchor: str = "start",
             strike: bool = False, pre: bool = False) -> None:
        attrs = f'x="{_n(x)}" y="{_n(y)}" font-size="{_n(size)}" fill="{fill or self.c["ink"]}"'
        if pre:  # code and output: keep runs of spaces (SVG collapses them otherwise)
            attrs += ' xml:space="preserve"'
        if family != MONO:
            attrs += f' font-family="{family}"'
        if weight:
            attrs += f' font-weight="{weight}"'
        if anchor != "start":
            attrs += f' text-anchor="{anchor}"'
        if strike:
            attrs += ' text-decoration="line-through"'
        self.parts.append(f"<text {attrs}>{clean(text)}</text>")

    def raw(self, markup: str) -> None:
        self.parts.append(markup)


# ---------- memory ----------

def _kind_colours(c: dict[str, str], state: str) -> tuple[str, str, str]:
    """(ink, fill, banded fill) of a footprint, from the legend's words (``leaf``, ``nonleaf held`` …)."""
    words = state.split()
    if "held" in words:
        return c["saved"], c["saved_bg"], c["saved_bg2"]
    if "leaf" in words:
        return c["leaf"], c["leaf_bg"], c["leaf_bg2"]
    if "nonleaf" in words:
        return c["nonleaf"], c["nonleaf_bg"], c["nonleaf_bg2"]
    return c["nograd"], c["nograd_bg"], c["nograd_bg2"]


def _grid_notes(g: Grid) -> list[str]:
    """What a grid says under its caption: the window drawn, and that a big storage's values are not read."""
    return ([g.window] if g.window else []) + ([] if g.values else [
        _("where each element lives (a storage this big is not read)")])


def _grid_height(g: Grid) -> float:
    captions = 1 + len(_grid_notes(g))
    cell_h = GRID_H if g.values else GRID_ADDR_H
    return 6 + captions * GRID_CAPTION + 14 + g.rows * (cell_h + GRID_GAP)


def grid_width(g: Grid) -> float:
    """The width a grid takes inside its strip (its left margin included, its right one too)."""
    return 8 + GRID_HEAD_W + g.cols * (GRID_CELL + GRID_GAP) - GRID_GAP + 8


def _body_height(strip: Strip) -> float:
    """The height of a strip's cells (or bins) and its rows under them: where its grids start."""
    rows = len(strip.rows)
    if strip.scaled:  # the size, the ruler, then a row of bins per tensor
        return 32 + rows * (ROW_H + 4)
    return len(strip.lines) * (CELL_H + 4 + rows * (ROW_H + 4)) + (len(strip.lines) - 1) * 6


def _strip_height(strip: Strip, frame: Frame) -> float:
    grids = sum(_grid_height(row.grid) for row in strip.rows if row.grid)
    notes = sum(18 for k in (strip.more_k, strip.note_k) if frame.text(k))
    return 12 + _body_height(strip) + grids + notes


def _draw_grid(cv: Canvas, row: Row, g: Grid, values: list[str], changed: set[str], frame: Frame,
               x: float, y: float, w: float) -> float:
    """A 2-D tensor as rows × columns under its strip, as the page's ``grid_html`` draws it: each cell
    the value of the storage cell its strides point at, and that cell's number after @; the height."""
    c = cv.c
    ink, fill, _band = _kind_colours(c, frame.state(row.k))
    name = frame.text(row.label_k)
    shape = _("as its shape: %(layout)s") % {"layout": row.layout}  # the page's words (_memory.html)
    cv.raw(f'<g role="group" aria-label="{clean(name + " " + shape)}">')
    shown = clip(name, max(mono_chars(w - 16, 11.5) // 2, 4))
    cv.text(x + 8, y + 18, shown, 11.5, ink, weight=600)
    name_w = (width_units(shown) + 1) * 0.6 * 11.5
    cv.text(x + 8 + name_w, y + 18, clip(shape, mono_chars(w - 16 - name_w, 10.5)), 10.5, c["muted"])
    top = y + 6 + GRID_CAPTION
    for note in _grid_notes(g):
        cv.text(x + 8, top + 12, clip(note, mono_chars(w - 16, 10)), 10, c["muted"])
        top += GRID_CAPTION
    left = x + 8 + GRID_HEAD_W
    for col in range(g.cols):
        cv.text(left + col * (GRID_CELL + GRID_GAP) + GRID_CELL / 2, top + 9, str(col), 9.5, c["muted"],
                anchor="middle")
    top += 14
    cell_h = GRID_H if g.values else GRID_ADDR_H
    for r in range(g.rows):
        cy = top + r * (cell_h + GRID_GAP)
        cv.text(left - 6, cy + cell_h / 2 + 3.5, str(r), 9.5, c["muted"], anchor="end")
        for col, cell in enumerate(g.row(r)):
            cx = left + col * (GRID_CELL + GRID_GAP)
            cv.rect(cx, cy, GRID_CELL, cell_h, fill, c["line_strong"], 5)
            if not g.values:
                cv.text(cx + GRID_CELL / 2, cy + 14, f"@{cell}", 10, c["ink"], anchor="middle")
                continue
            if str(cell) in changed:
                cv.rect(cx + 3, cy + 2, GRID_CELL - 6, 14, c["changed"], rx=3)
            value = clip(values[cell] if cell < len(values) else "", 6)
            cv.text(cx + GRID_CELL / 2, cy + 13, value, 11 if len(value) < 6 else 10, c["ink"], weight=600,
                    anchor="middle")
            cv.text(cx + GRID_CELL / 2, cy + 25, f"@{cell}", 8.5, c["muted"], anchor="middle")
    cv.raw("</g>")
    return _grid_height(g)


def _draw_strip(cv: Canvas, strip: Strip, group: str, frame: Frame, x: float, y: float, w: float) -> float:
    current_budget().check()  # a strip and its grids are bounded; a step can show many of them
    c = cv.c
    h = _strip_height(strip, frame)
    graph = group == "graph"
    fill, line = (c["strip_graph"], c["strip_graph_line"]) if graph else (c["strip"], c["line"])
    cv.rect(x, y, w, h, fill, line, 7)
    rows = strip.rows
    grid_x = x + 6 + LABEL_W
    label_r = grid_x - 8
    top = y + 6

    def head(y0: float, first_line: bool, first: int, last: int) -> None:
        if first_line:
            size = strip.size + (f" · {strip.scale}" if strip.scale else "")
            cv.text(label_r, y0 + 13, clip(size, mono_chars(LABEL_W - 4, 10)), 10, c["muted"], anchor="end")
        else:
            cv.text(label_r, y0 + 21, _("elements {first}–{last}").format(first=first, last=last - 1), 10,
                    c["muted"], anchor="end")

    def row_label(y0: float, row) -> None:  # noqa: ANN001 - a memory Row
        ink = _kind_colours(c, frame.state(row.k))[0]
        version = frame.text(row.version_k)
        bumped = "bump" in frame.state(row.version_k).split()
        room = mono_chars(LABEL_W - 12, 11.5) - (len(version) + 2 if version else 0)
        name = clip(frame.text(row.label_k), max(room, 4))
        if version:
            cv.text(label_r, y0 + 11, version, 10.5, c["error"] if bumped else c["faint"],
                    anchor="end", weight=700 if bumped else None)
        name_r = label_r - (len(version) * 6.3 + 5 if version else 0)
        cv.text(name_r, y0 + 11, name, 11.5, ink, weight=600, anchor="end")
        detail = row.layout + (" · " + " · ".join(row.flags) if row.flags else "")
        cv.text(label_r, y0 + 23, clip(detail, mono_chars(LABEL_W - 4, 9.5)), 9.5,
                c["saved"] if row.flags else c["muted"], anchor="end")

    if strip.scaled:
        head(top, True, 0, 0)
        bins_w = CELLS * (CELL + CELL_GAP) - CELL_GAP
        cv.text(grid_x, top + 29, "0", 10, c["faint"])
        cv.text(grid_x + bins_w, top + 29, strip.size.split(" ")[0], 10, c["faint"], anchor="end")
        cv.rect(grid_x, top + 33, bins_w, 1, c["line_strong"])
        ry = top + 38
        for row in rows:
            row_label(ry, row)
            ink = _kind_colours(c, frame.state(row.k))[0]
            bin_w = (bins_w + 1) / max(len(row.levels), 1)
            for i, level in enumerate(row.levels):
                bx = grid_x + i * bin_w
                if level:
                    cv.rect(bx, ry + 2, bin_w - 1, 22, ink, rx=2, opacity=(0.3, 0.55, 0.8, 1.0)[level - 1])
                else:
                    cv.rect(bx, ry + 2, bin_w - 1, 22, c["bin0"], rx=2)
            ry += ROW_H + 4
    else:
        values = frame.text(strip.cells_k).split(" ")
        changed = set(frame.state(strip.cells_k).split())
        ly = top
        for line_index, (first, last) in enumerate(strip.lines):
            head(ly, line_index == 0, first, last)
            for col, cell in enumerate(range(first, last)):
                cx = grid_x + col * (CELL + CELL_GAP)
                cv.rect(cx, ly, CELL, CELL_H, c["cell"], c["line_strong"], 5)
                if str(cell) in changed:
                    cv.rect(cx + 3, ly + 14, CELL - 6, 15, c["changed"], rx=3)
                cv.text(cx + CELL / 2, ly + 11, str(cell), 9, c["faint"], anchor="middle")
                value = clip(values[cell] if cell < len(values) else "", 6)
                size = 11 if len(value) < 6 else 10  # six characters fill a cell
                cv.text(cx + CELL / 2, ly + 26, value, size, weight=600, anchor="middle")
            ry = ly + CELL_H + 4
            for row in rows:
                row_label(ry, row)
                ink, fill, band = _kind_colours(c, frame.state(row.k))
                for col, mark in enumerate(row.marks[first:last]):
                    mx = grid_x + col * (CELL + CELL_GAP)
                    if mark is None:
                        cv.rect(mx + 0.5, ry + 2.5, CELL - 1, 21, "none", c["line"], 5, dash="3 2")
                        continue
                    cv.rect(mx, ry + 2, CELL, 22, band if mark.band else fill, rx=5)
                    cv.text(mx + CELL / 2, ry + 17, mark.text, 11, ink, weight=700 if mark.many else None,
                            anchor="middle")
                ry += ROW_H + 4
            ly = ry + 6
    # the grids under the strip: where the lines (or the scaled rows) end
    gy = top + _body_height(strip)
    shown = frame.text(strip.cells_k).split(" ") if strip.valued else []
    marked = set(frame.state(strip.cells_k).split()) if strip.valued else set()
    for row in rows:
        if row.grid:
            gy += _draw_grid(cv, row, row.grid, shown, marked, frame, x, gy, w)
    notes = [text for text in (frame.text(strip.more_k), frame.text(strip.note_k)) if text]
    for i, note in enumerate(notes):
        ny = y + h - 8 - 18 * (len(notes) - 1 - i)
        cv.text(x + 8, ny, clip(note, mono_chars(w - 16, 11)), 11, c["saved"] if graph else c["muted"],
                family=SANS, weight=600)
    return h


FOLD_H = 22  # "… 997 more like losses[…]"


def _fold_text(fam: Family, frame: Frame) -> str | None:
    if fam.fold_k is None or fam.count_k is None or not frame.shows(fam.fold_k):
        return None
    return _("… {count} more like {title}").format(count=frame.text(fam.count_k), title=fam.title)


def memory_height(view: ExplorerView, frame: Frame) -> float:
    m = view.memory
    if frame.shows(m.empty_k):
        return HEAD_H + 40
    h = HEAD_H + 10
    for group in m.leaf_groups():
        if not frame.shows(group.k):
            continue
        h += 24 + 6
        for fam in group.families:
            h += sum(_strip_height(s, frame) + 8 for s in (*fam.first, *fam.last) if frame.shows(s.k))
            h += FOLD_H if _fold_text(fam, frame) else 0
    return h + 6


def shown_grids(view: ExplorerView, frame: Frame) -> list[Grid]:
    """The grids the step's memory view draws."""
    return [row.grid for group, strip in view.memory.strips()
            if frame.shows(group.k) and frame.shows(strip.k) for row in strip.rows if row.grid]


def memory_width(grids: list[Grid]) -> float:
    """The memory panel's width: the strips' own, or wider where a grid the step shows needs it."""
    return max([MEMORY_W, *(grid_width(g) + 2 * PANEL_PAD for g in grids)])


def draw_memory(cv: Canvas, view: ExplorerView, frame: Frame, x: float, y: float, w: float, h: float) -> None:
    c = cv.c
    _panel(cv, x, y, w, h, _("Memory"), _("a strip per storage · a row per tensor"))
    m = view.memory
    if frame.shows(m.empty_k):
        cv.text(x + PANEL_PAD, y + HEAD_H + 24, _("No tensors at this step."), 12.5, c["faint"], family=SANS)
        return
    gy = y + HEAD_H + 10
    for group in m.leaf_groups():
        if not frame.shows(group.k):
            continue
        colour = c["saved"] if group.name == "graph" else c["head"]
        cv.text(x + PANEL_PAD, gy + 13, group.title, 12, colour, family=SANS, weight=650)
        gy += 24
        for fam in group.families:
            for strip in fam.first:
                if frame.shows(strip.k):
                    gy += _draw_strip(cv, strip, group.name, frame, x + PANEL_PAD, gy, w - 2 * PANEL_PAD) + 8
            fold = _fold_text(fam, frame)
            if fold:
                room = mono_chars(w - 2 * PANEL_PAD - 16, 11.5)
                cv.text(x + PANEL_PAD + 8, gy + 13, clip(fold, room), 11.5, c["muted"], weight=600)
                gy += FOLD_H
            for strip in fam.last:
                if frame.shows(strip.k):
                    gy += _draw_strip(cv, strip, group.name, frame, x + PANEL_PAD, gy, w - 2 * PANEL_PAD) + 8
        gy += 6


# ---------- graph ----------

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
    _panel(cv, x, y, w, h, _("Autograd graph"), _("arrows: data flow"))
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
    cv.raw(f'<g transform="translate({_n(ox)},{_n(oy)})">')
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


# ---------- frame of the picture ----------

def _panel(cv: Canvas, x: float, y: float, w: float, h: float, title: str, hint: str) -> None:
    c = cv.c
    cv.rect(x, y, w, h, c["panel"], c["line"], 10)
    cv.rect(x, y + HEAD_H, w, 1, c["line"])
    cv.text(x + PANEL_PAD, y + 22, title.upper(), 12, c["head"], family=SANS, weight=700)
    title_w = width_units(title) * 8.6 + 12
    if width_units(hint) <= int((w - 2 * PANEL_PAD - title_w) / 5.6):  # a hint that does not fit is left out
        cv.text(x + PANEL_PAD + title_w, y + 22, hint, 11, c["muted"], family=SANS)


def _wrap(text: str, chars: int, max_lines: int) -> list[str]:
    lines: list[str] = []
    for paragraph in text.replace("\t", "    ").splitlines() or [""]:
        while width_units(paragraph) > chars:
            limit = _fit(paragraph, chars)  # ``chars`` itself for text without wide characters
            cut = paragraph.rfind(" ", 0, limit)
            cut = cut if cut > limit // 2 else limit
            lines.append(paragraph[:cut])
            paragraph = paragraph[cut:].lstrip(" ")
        lines.append(paragraph)
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], clip(lines[max_lines - 1], chars - 1) + " …"]
    return lines


def _legend(cv: Canvas, x: float, y: float, right: float, grids: bool = False) -> float:
    """The legend's items in rows that end before ``right``; the height it took. ``grids``: the image
    draws a 2-D tensor as its shape, so what its "@n" means is said too."""
    c = cv.c
    left, top = x, y
    items: list[tuple[str, str, str | None, str | None, float]] = [
        (_("leaf, requires grad"), c["leaf_bg"], c["leaf"], None, 7),
        (_("non-leaf"), c["nonleaf_bg"], c["nonleaf"], None, 7),
        (_("saved for backward / held by the graph"), c["saved_bg"], c["saved"], None, 7),
        (_("no grad"), c["nograd_bg"], c["faint"], "3 2", 7),
        ("grad_fn", c["fn"], c["fn_line"], None, 3),
    ]
    if grids:
        items.append((_("@5: in a grid, the storage cell the element lives in"), "", None, None, 0))
    for label, fill, stroke, dash, rx in items:
        swatch = 21 if fill else 0
        width = swatch + width_units(label) * 6.6  # monospace: its width is known, so the gaps are even
        if x > left and x + width > right:
            x, y = left, y + 20
        if fill:
            cv.rect(x, y - 9, 16, 11, fill, stroke, rx, 1.5, dash)
        cv.text(x + swatch, y, clip(label, mono_chars(right - x - swatch, 11)), 11, c["muted"])
        x += width + 16
    return y - top + 18


def render_svg(view: ExplorerView, step: int | None = None, which: str = "both", theme: str = "light") -> str:
    """The SVG of ``step`` (0-based; default: the view's initial step). ``which``: both | memory | graph."""
    c = THEMES[theme]
    frame = Frame(view.tracks, view.initial if step is None else max(0, min(step, view.step_count - 1)))
    has_steps = view.step_count > 0
    show_memory = has_steps and which in ("both", "memory")
    show_graph = has_steps and which in ("both", "graph")
    graph_w, graph_h = graph_size(view, frame) if show_graph else (0, 0)
    memory_h = memory_height(view, frame) if show_memory else 0
    grids = shown_grids(view, frame) if show_memory else []
    memory_w = memory_width(grids) if show_memory else 0
    panels_w = memory_w + graph_w + (GAP if show_memory and show_graph else 0)
    width = max(panels_w + 2 * PAD, MIN_WIDTH)
    inner = width - 2 * PAD
    cv = Canvas(c)
    y = PAD

    # Header: where we are, and the line that ran.
    label = step_label(view, frame.step) if has_steps else _("Nothing ran")
    if has_steps and (phase := phase_text(view, frame.step)):
        label = f"{label} · {phase}"
    cv.text(PAD, y + 13, label, 13, c["head"], family=SANS, weight=700)
    cv.text(width - PAD, y + 13, "∂ Autograd Explorer", 11.5, c["muted"], family=SANS, anchor="end")
    y += 22
    if has_steps:
        line_no = view.lines[frame.step]
        source = view.code.splitlines()[line_no - 1] if 0 < line_no <= len(view.code.splitlines()) else ""
        cv.rect(PAD, y, inner, 24, c["code_bg"], rx=6)
        cv.rect(PAD, y, 3, 24, c["accent"])
        shown = clip(source.rstrip(), mono_chars(inner - 60, 12.5))
        cv.text(PAD + 12, y + 16, f"{line_no:>3}  {shown}", 12.5, pre=True)
        y += 24 + GAP

    if view.error is not None:
        chars = mono_chars(inner - 28, 12)
        message = (f"{view.error.where}: " if view.error.where else "") + view.error.text
        lines = _wrap(message, chars, 4)
        box_h = 30 + 17 * len(lines) + 4
        cv.rect(PAD, y, inner, box_h, c["error_bg"], c["error_line"], 8)
        cv.rect(PAD, y, 4, box_h, c["error"])
        cv.text(PAD + 14, y + 20, view.error.title, 13, c["error_ink"], family=SANS, weight=650)
        for i, text in enumerate(lines):
            cv.text(PAD + 14, y + 38 + 17 * i, text, 12, pre=True)
        y += box_h + GAP
    if view.notice is not None:
        notice_lines = _wrap(view.notice.text, mono_chars(inner, 12) * 6 // 5, 3)  # sans is narrower
        for i, text in enumerate(notice_lines):
            cv.text(PAD, y + 12 + 17 * i, text, 12, c["saved"], family=SANS)
        y += 17 * len(notice_lines) + 3 + GAP

    panels_h = max(memory_h, graph_h)
    x = PAD
    if show_memory:
        memory_w = memory_w if show_graph else inner  # alone, the memory takes the whole width
        draw_memory(cv, view, frame, x, y, memory_w, panels_h)
        x += memory_w + GAP
    if show_graph:
        draw_graph(cv, view, frame, x, y, width - PAD - x if not show_memory else graph_w, panels_h)
    if panels_h:
        y += panels_h + GAP

    printed = view.stdout_at(frame.step) if has_steps else ""
    if printed:
        all_lines = printed.rstrip("\n").split("\n")
        shown = [clip(line, mono_chars(inner - 2 * PANEL_PAD, 12)) for line in all_lines[-OUTPUT_LINES:]]
        out_h = HEAD_H + 12 + 17 * len(shown)
        hint = _("printed so far") + (_(" (last {shown} of {total} lines)").format(shown=OUTPUT_LINES,
                                                                                  total=len(all_lines))
                                      if len(all_lines) > OUTPUT_LINES else "")
        _panel(cv, PAD, y, inner, out_h, _("Output"), hint)
        for i, text in enumerate(shown):
            cv.text(PAD + PANEL_PAD, y + HEAD_H + 20 + 17 * i, text, 12, pre=True)
        y += out_h + GAP

    if has_steps:
        y += _legend(cv, PAD, y + 10, width - PAD, bool(grids))
    height = y + PAD - (GAP if not has_steps else 0)
    title = clean(f"Autograd Explorer · {label}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_n(width)}" height="{_n(height)}" '
        f'viewBox="0 0 {_n(width)} {_n(height)}" font-family="{MONO}" role="img" aria-label="{title}">'
        f"<title>{title}</title>"
        '<defs><marker id="ax-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
        f'orient="auto-start-reverse"><path d="M0,1 L9,5 L0,9 z" fill="{c["edge"]}"/></marker></defs>'
        f'<rect width="100%" height="100%" fill="{c["bg"]}" rx="12"/>'
        + "".join(cv.parts)
        + "</svg>\n"
    )


def error_svg(title: str, message: str, theme: str = "light") -> str:
    """A small image that says why there is no picture (bad link, unknown id, busy server)."""
    c = THEMES.get(theme, LIGHT)
    width = MIN_WIDTH
    lines = _wrap(message, mono_chars(width - 2 * PAD - 28, 12), 6)
    height = 2 * PAD + 38 + 17 * len(lines)
    cv = Canvas(c)
    cv.rect(PAD, PAD, width - 2 * PAD, height - 2 * PAD, c["error_bg"], c["error_line"], 8)
    cv.rect(PAD, PAD, 4, height - 2 * PAD, c["error"])
    cv.text(PAD + 14, PAD + 22, title, 13, c["error_ink"], family=SANS, weight=650)
    for i, text in enumerate(lines):
        cv.text(PAD + 14, PAD + 42 + 17 * i, text, 12)
    label = clean(f"Autograd Explorer: {title}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="{MONO}" role="img" aria-label="{label}">'
        f'<title>{label}</title><rect width="100%" height="100%" fill="{c["bg"]}" rx="12"/>'
        + "".join(cv.parts)
        + "</svg>\n"
    )
