"""The Jinja environment the pages are written with, and the context of one run's fragment.

No FastAPI here: the web pages (``app.web.pages``), the standalone page (``app.standalone``, which the
library entry ``autograd_explorer`` and ``python -m app render`` write) and the tests all render the
same templates through ``render``. User strings only ever reach the HTML as escaped text or inside
``<script type="application/json">`` through ``tojson``.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import orjson
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape
from jinja2.runtime import Context
from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup

from app import i18n
from app.diagnostics import Analysis
from app.render import build_explorer, client_payload, frame_at
from app.render.compare import partner
from app.render.explorer import ExplorerView, phase_text, step_label
from app.render.findings import TryLink, findings_context
from app.render.notices import RunLimits
from app.schema import DeltaTrace

ROOT = Path(__file__).resolve().parents[1]


def asset_dir(name: str) -> Path:
    """``templates``, ``static`` or ``node_modules``: the source tree's, else the copy a wheel carries
    (``app/_assets/``, setup.py) when the library was installed from one."""
    packaged = Path(__file__).resolve().parent / "_assets" / name
    return packaged if packaged.is_dir() else ROOT / name


# d3-zoom (the graph viewer's gestures) and its d3 dependencies, in the order they must load.
GRAPH_VENDOR = ("d3-dispatch", "d3-selection", "d3-timer", "d3-color", "d3-interpolate", "d3-ease",
                "d3-transition", "d3-drag", "d3-zoom")

_RENDERING: ContextVar[list[Context] | None] = ContextVar("rendering", default=None)


class _Context(Context):
    """A template context that ``render`` can find again once the template is written.

    A template that defines a macro (``_memory.html``, ``_diagnostics.html``) makes a reference cycle:
    its context holds the macro, whose function's closure holds the context, whose parent holds
    everything the template was given. The whole view model then outlives the render until the cyclic
    collector finds it: on Adam x100, 100,000 objects that the next young collection scanned before
    freeing (~30 ms of the request). ``render`` empties each context's own variables instead, so the
    view is freed by reference counting the moment the page is written."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        made = _RENDERING.get()
        if made is not None:
            made.append(self)


templates = Environment(
    loader=FileSystemLoader(asset_dir("templates")),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    extensions=["jinja2.ext.i18n"],
)
templates.context_class = _Context


_HTML_UNSAFE = ((b"<", b"\\u003c"), (b">", b"\\u003e"), (b"&", b"\\u0026"), (b"'", b"\\u0027"))


def tojson(value: Any, indent: int | None = None) -> Markup:
    """Jinja's ``tojson`` (JSON safe in a ``<script>`` and in a single-quoted attribute: ``<``, ``>``,
    ``&`` and ``'`` escaped), written by orjson and escaped as bytes: ~7x faster than ``json.dumps`` on
    a page's step data (Adam x100: 2.5 MB, 30 ms -> 4 ms), and compact. The same value once parsed:
    keys sorted as before, text as UTF-8 rather than ``\\u`` escapes (no UTF-8 sequence holds an
    ASCII byte). What orjson refuses (a lone surrogate a snippet printed, an integer past 64 bits)
    goes to jinja's own, as before."""
    if indent is None:
        try:
            raw = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
        except TypeError:  # orjson.JSONEncodeError
            pass
        else:
            for unsafe, escaped in _HTML_UNSAFE:
                raw = raw.replace(unsafe, escaped)
            return Markup(raw.decode())
    return htmlsafe_json_dumps(value, sort_keys=True, indent=indent)


templates.filters["tojson"] = tojson
# One environment for every language: each gettext call asks the request's locale (app.i18n).
templates.install_gettext_translations(i18n.CurrentTranslations(), newstyle=True)  # type: ignore[attr-defined]
templates.globals["step_label"] = step_label
templates.globals["phase_text"] = phase_text
templates.globals["graph_vendor"] = GRAPH_VENDOR
templates.globals["lang_tag"] = i18n.current_tag
templates.globals["lang_switch"] = i18n.switch_links
templates.globals["js_catalog"] = i18n.js_catalog
templates.globals["number"] = i18n.number
templates.globals["error_text"] = i18n.error_text


def render(name: str, **context: Any) -> str:
    made: list[Context] = []
    token = _RENDERING.set(made)
    try:
        return templates.get_template(name).render(**context)
    finally:
        _RENDERING.reset(token)
        for ctx in made:  # the template is written: no macro of it is called again (see _Context)
            ctx.vars.clear()


def run_context(result: DeltaTrace, code: str, step: int | None, limits: RunLimits,
                try_link: TryLink | None = None) -> dict[str, Any]:
    """Everything ``_run.html`` needs (pure: the embed mode, the standalone page and tests call it too)."""
    analysis = Analysis(result, code)  # fed by the views' replay: the trace is replayed once
    view = build_explorer(result, code, step, limits, also=[analysis])
    return fragment_context(view, result, code, analysis, try_link=try_link)


def fragment_context(view: ExplorerView, result: DeltaTrace, code: str, analysis: Analysis,
                     measured: Sequence[int] | None = None,
                     try_link: TryLink | None = None) -> dict[str, Any]:
    """``_run.html``'s context from a built view and the analysis its replay fed (``measured``: the
    real CUDA device's figures, ``app.render.findings.timeline_view``; ``try_link``: how a finding's
    fix opens beside the code, when a server can run both — the web layer's)."""
    frame = frame_at(view)
    found = analysis.report()  # the rules run here, fed by the views' replay; the views only draw
    return {"view": view, "frame": frame, "payload": client_payload(view), "twin": partner(code),
            **findings_context(found, code, frame.step, try_link=try_link, gpu=view.gpu, measured=measured)}
