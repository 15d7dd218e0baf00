"""The SVG pictures' drawing surface: themes, XML-safe text, monospace measures and a canvas.

Shared by the step's picture (``app.render.svg``, with its memory and graph panels in ``svg_memory``
and ``svg_graph``) and the compare picture (``app.render.compare``). Text cannot be measured in an
``<img>``, so widths are estimated from the monospace advance (0.6 em), as the graph layout itself
does (``app.render.graph_draw.CHAR_W``).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from html import escape

MONO = "monospace"
SANS = "sans-serif"
PAD = 16
GAP = 12
PANEL_PAD = 14
HEAD_H = 34  # a panel's title bar

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


def num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


@dataclass
class Canvas:
    """SVG elements in drawing order, with the theme's colours at hand."""

    c: dict[str, str]
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str | None = None,
             rx: float = 0, width: float = 1, dash: str | None = None, opacity: float | None = None) -> None:
        extra = f' stroke="{stroke}" stroke-width="{num(width)}"' if stroke else ""
        extra += f' stroke-dasharray="{dash}"' if dash else ""
        extra += f' fill-opacity="{opacity}"' if opacity is not None else ""
        extra += f' rx="{num(rx)}"' if rx else ""
        box = f'x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}"'
        self.parts.append(f'<rect {box} fill="{fill}"{extra}/>')

    def text(self, x: float, y: float, text: str, size: float = 12, fill: str | None = None, *,
             family: str = MONO, weight: int | None = None, anchor: str = "start",
             strike: bool = False, pre: bool = False) -> None:
        attrs = f'x="{num(x)}" y="{num(y)}" font-size="{num(size)}" fill="{fill or self.c["ink"]}"'
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


def panel(cv: Canvas, x: float, y: float, w: float, h: float, title: str, hint: str) -> None:
    c = cv.c
    cv.rect(x, y, w, h, c["panel"], c["line"], 10)
    cv.rect(x, y + HEAD_H, w, 1, c["line"])
    cv.text(x + PANEL_PAD, y + 22, title.upper(), 12, c["head"], family=SANS, weight=700)
    title_w = width_units(title) * 8.6 + 12
    if width_units(hint) <= int((w - 2 * PANEL_PAD - title_w) / 5.6):  # a hint that does not fit is left out
        cv.text(x + PANEL_PAD + title_w, y + 22, hint, 11, c["muted"], family=SANS)


def wrap(text: str, chars: int, max_lines: int) -> list[str]:
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

