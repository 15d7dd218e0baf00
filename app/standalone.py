"""One run as a standalone HTML page: the playground's views, stepper and diagnostics in one file that
works offline — every script and style inline, no URL fetched (a system font, as the page uses).

It is the same fragment the playground swaps in (``templates/_run.html``, from ``app.templating``'s
``run_context``), beside a read-only listing of the code, in ``templates/standalone.html``. The
fragment is deflated and written in base64 (a 1,000-step run is ~3 MB of markup, ~0.3 MB packed);
``static/standalone.js`` unpacks it with the browser's ``DecompressionStream`` and hands it to the
page's own scripts (``explorer.js``, ``graph.js``, ``diagnostics.js``, d3-zoom) as htmx would.

The library entry (``autograd_explorer``: ``Run.save``, the notebook's ``text/html``), ``python -m app
render FILE -o run.html`` and the playground's Download button all write this page.
"""

from __future__ import annotations

import base64
import html
import re
import zlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path

from markupsafe import Markup

from app.diagnostics import Analysis
from app.i18n import gettext as _
from app.render import build_explorer
from app.render.notices import RunLimits
from app.schema import DeltaTrace
from app.templating import GRAPH_VENDOR, asset_dir, fragment_context, render

STATIC = asset_dir("static")
NODE_MODULES = asset_dir("node_modules")
# The page's look: the playground's sheets, then the standalone page's own.
STYLES = ("explorer.css", "theme.css", "page.css", "diagnostics.css", "graph.css", "standalone.css")
# Before the views' scripts: the language, the theme, and the loader that stands in for htmx.
HEAD_SCRIPTS = ("i18n.js", "theme.js", "standalone.js")
# In the playground's order (base.html): the explorer's set-up runs before the graph's.
VIEW_SCRIPTS = ("explorer.js", "diagnostics.js")
PACK_LEVEL = 6  # zlib: level 9 packs a 3 MB run 2% smaller for twice the time

_SCRIPT_END = re.compile(r"</(script)", re.IGNORECASE)
_STYLE_END = re.compile(r"</(style)", re.IGNORECASE)


class MissingAssets(RuntimeError):
    """The front-end packages (d3-zoom and its dependencies) are not installed."""


def _read(path: Path) -> str:
    if not path.is_file():
        raise MissingAssets(f"{path} is missing: scripts/setup (npm ci) installs the front-end packages")
    return path.read_text(encoding="utf-8")


@cache
def assets() -> tuple[Markup, Markup, Markup]:
    """(styles, head scripts, view scripts), each ready to sit inside one ``<style>`` / ``<script>``:
    a closing tag in their text (none today) is written so that it does not close the element."""
    styles = "\n".join(_read(STATIC / name) for name in STYLES)
    head = "\n;\n".join(_read(STATIC / name) for name in HEAD_SCRIPTS)
    vendor = [_read(NODE_MODULES / name / "dist" / f"{name}.min.js") for name in GRAPH_VENDOR]
    own = [_read(STATIC / name) for name in VIEW_SCRIPTS]
    views = "\n;\n".join([*own, *vendor, _read(STATIC / "graph.js")])
    return (Markup(_STYLE_END.sub(r"<\\/\1", styles)), Markup(_SCRIPT_END.sub(r"<\\/\1", head)),
            Markup(_SCRIPT_END.sub(r"<\\/\1", views)))


def pack(fragment: str) -> str:
    """The fragment deflated (zlib) in base64: what ``static/standalone.js`` unpacks."""
    return base64.b64encode(zlib.compress(fragment.encode("utf-8"), PACK_LEVEL)).decode("ascii")


def page(context: dict, title: str, subtitle: str = "") -> str:
    """The standalone page of a run fragment's context (``app.templating.fragment_context``)."""
    context = {**context, "twin": None}  # no server to compare on
    fragment = render("_run.html", **context)
    styles, head, views = assets()
    code: str = context["view"].code
    return render("standalone.html", title=title, subtitle=subtitle, lines=code.rstrip("\n").split("\n"),
                  packed=pack(fragment), styles=styles, head_scripts=head, view_scripts=views)


def standalone_html(result: DeltaTrace, code: str, step: int | None = None, limits: RunLimits | None = None,
                    title: str | None = None, measured: Sequence[int] | None = None) -> str:
    """The standalone page of one run (``measured``: the real device's ``memory_allocated`` per step,
    when the code ran on CUDA)."""
    analysis = Analysis(result, code)
    view = build_explorer(result, code, step, limits, also=[analysis])
    return page(fragment_context(view, result, code, analysis, measured), title or _("A run"))


def iframe(document: str, title: str, height: int = 720) -> str:
    """The page inside an ``<iframe srcdoc>``: what a notebook shows. Its own document keeps its ids,
    styles and keyboard to itself, so several runs on one notebook page never meet; it fits its
    height to the run (``static/standalone.js``)."""
    return (f'<iframe class="autograd-explorer-run" srcdoc="{html.escape(document, quote=True)}" '
            f'title="{html.escape(title, quote=True)}" allow="fullscreen" '
            f'style="width: 100%; height: {height}px; border: 0; display: block"></iframe>')
