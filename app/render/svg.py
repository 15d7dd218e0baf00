"""One step of a run as a standalone SVG image, for places where an iframe cannot go (a README).

Pure: an ``ExplorerView`` and a step in, SVG text out, drawn from the same view model as the page
(``frame_at(view, step)``), so the image and the page agree. The image is self-contained for
``<img>``: no scripts, no styles that load anything, no links, no external references (the one
``url(#…)`` is the arrowhead marker inside the file), fonts are generic families, and every user
string (names, prints, error messages) is escaped and stripped of characters XML forbids.

The canvas, themes and text measures are ``svg_canvas``; the memory panel ``svg_memory``, the graph
panel ``svg_graph``; this module frames them: the header, the error and notice, the output, the legend.
"""

from __future__ import annotations

from app.i18n import gettext as _
from app.render.explorer import ExplorerView, phase_text, step_label
from app.render.svg_canvas import (
    GAP,
    HEAD_H,
    LIGHT,
    MONO,
    PAD,
    PANEL_PAD,
    SANS,
    THEMES,
    Canvas,
    clean,
    clip,
    mono_chars,
    num,
    panel,
    width_units,
    wrap,
)
from app.render.svg_graph import draw_graph, graph_size
from app.render.svg_memory import draw_memory, memory_height, memory_width, shown_grids
from app.render.tracks import Frame

OUTPUT_LINES = 6
MIN_WIDTH = 560


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
        lines = wrap(message, chars, 4)
        box_h = 30 + 17 * len(lines) + 4
        cv.rect(PAD, y, inner, box_h, c["error_bg"], c["error_line"], 8)
        cv.rect(PAD, y, 4, box_h, c["error"])
        cv.text(PAD + 14, y + 20, view.error.title, 13, c["error_ink"], family=SANS, weight=650)
        for i, text in enumerate(lines):
            cv.text(PAD + 14, y + 38 + 17 * i, text, 12, pre=True)
        y += box_h + GAP
    if view.notice is not None:
        notice_lines = wrap(view.notice.text, mono_chars(inner, 12) * 6 // 5, 3)  # sans is narrower
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
        panel(cv, PAD, y, inner, out_h, _("Output"), hint)
        for i, text in enumerate(shown):
            cv.text(PAD + PANEL_PAD, y + HEAD_H + 20 + 17 * i, text, 12, pre=True)
        y += out_h + GAP

    if has_steps:
        y += _legend(cv, PAD, y + 10, width - PAD, bool(grids))
    height = y + PAD - (GAP if not has_steps else 0)
    title = clean(f"Autograd Explorer · {label}")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
        f'viewBox="0 0 {num(width)} {num(height)}" font-family="{MONO}" role="img" aria-label="{title}">'
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
    lines = wrap(message, mono_chars(width - 2 * PAD - 28, 12), 6)
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
