"""What one run is shown as outside the server: the standalone page, the picture ``/render.svg``
draws, the text view, a short summary and the JSON the API answers — each from the same view model
and diagnostics as the playground, built once (one replay) and only when first asked for.

``autograd_explorer.Run`` (the library entry) and ``python -m app render`` are thin layers over this.
"""

from __future__ import annotations

from functools import cached_property

import orjson

from app import i18n
from app.diagnostics import Analysis, analyze
from app.render import build_explorer
from app.render.explorer import ExplorerView
from app.render.notices import RunLimits
from app.render.svg import render_svg
from app.schema import DeltaTrace, Diagnostic, MemoryChange
from app.standalone import iframe, page
from app.templating import fragment_context
from app.textview import summary, text_view

FORMATS = ("html", "svg", "txt", "json")


class RenderedRun:
    """One trace of ``code`` (a validated ``DeltaTrace``), rendered on demand in ``lang``."""

    def __init__(self, trace: DeltaTrace, code: str, limits: RunLimits, title: str = "",
                 measured: tuple[int, ...] | None = None, lang: str = "en") -> None:
        self.trace, self.code, self.limits, self.title = trace, code, limits, title
        self.measured = measured
        self.locale = i18n.negotiate(lang)

    @cached_property
    def _built(self) -> tuple[ExplorerView, Analysis]:
        analysis = Analysis(self.trace, self.code)
        with i18n.use_locale(self.locale):
            view = build_explorer(self.trace, self.code, None, self.limits, also=[analysis])
        return view, analysis

    @cached_property
    def _found(self) -> tuple[list[Diagnostic], list[MemoryChange]]:
        view, analysis = self._built
        with i18n.use_locale(self.locale):
            return analysis.result()

    @property
    def view(self) -> ExplorerView:
        return self._built[0]

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return self._found[0]

    @property
    def memory(self) -> list[MemoryChange]:
        return self._found[1]

    @cached_property
    def html(self) -> str:
        """The standalone page (``app.standalone``)."""
        view, analysis = self._built
        self._found  # noqa: B018 - the findings are said once, in the run's language
        with i18n.use_locale(self.locale):
            context = fragment_context(view, self.trace, self.code, analysis, self.measured)
            return page(context, self.title or "Autograd Explorer", self.subtitle())

    def frame(self, height: int = 720) -> str:
        """The page in an ``<iframe srcdoc>``: a notebook's ``text/html``."""
        return iframe(self.html, self.title or "Autograd Explorer", height)

    def svg(self, step: int | None = None, which: str = "both", theme: str = "light") -> str:
        """The picture ``/render.svg`` draws of ``step`` (0-based; default: the last)."""
        with i18n.use_locale(self.locale):
            return render_svg(self.view, step, which, theme)

    def text(self) -> str:
        """The step-by-step text view (``app.textview``)."""
        with i18n.use_locale(self.locale):
            return text_view(self.trace, self.code, self.limits, self.title, self.diagnostics)

    def summary(self) -> str:
        with i18n.use_locale(self.locale):
            return summary(self.trace, self.memory, self.view.gpu, self.diagnostics, self.limits, self.title)

    def subtitle(self) -> str:
        return i18n.ngettext("{n} step", "{n} steps", len(self.trace.steps)).format(
            n=i18n.number(len(self.trace.steps)))

    def json(self) -> str:
        """The delta trace with its diagnostics and memory accounting: what ``POST /api/run`` answers
        for ``"format": "delta"``."""
        response = analyze(self.trace, self.code, (self.diagnostics, self.memory))
        return orjson.dumps(response.model_dump(mode="json")).decode()

    def as_format(self, kind: str) -> str:
        if kind == "html":
            return self.html
        if kind == "svg":
            return self.svg()
        if kind == "txt":
            return self.text()
        if kind == "json":
            return self.json()
        raise ValueError(f"unknown format {kind!r}: one of {', '.join(FORMATS)}")
