"""The memory panel of a step's SVG picture: a strip per storage, a row per tensor, and a 2-D
tensor's grid under its strip, drawn from the page's own view model (``app.render.memory``) so the
picture and ``_memory.html`` agree."""

from __future__ import annotations

from app.budget import current_budget
from app.i18n import gettext as _
from app.render.explorer import ExplorerView
from app.render.grid import Grid
from app.render.memory_view import Family, Row, Strip
from app.render.svg_canvas import HEAD_H, PANEL_PAD, SANS, Canvas, clean, clip, mono_chars, panel, width_units
from app.render.tracks import Frame

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
    panel(cv, x, y, w, h, _("Memory"), _("a strip per storage · a row per tensor"))
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

