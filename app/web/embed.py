"""Embed mode: ``GET /embed?...`` for an ``<iframe>`` in docs, and the ``POST /embed/run`` fragment.

The same views as the playground (``app.render``, the same partials) with minimal chrome: the code
(a small editor, or read-only), the stepper, the memory view and/or the graph, the output. Only
routes under ``/embed`` may be framed by other sites (``app.web.framing``). ``static/embed.js``
tells the parent page the frame's height and keeps the "Open in playground" link on the code shown.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.gallery import Example
from app.i18n import gettext as _
from app.i18n import say
from app.render import build_explorer, client_payload, frame_at
from app.render.compare import CompareView, heading, shown
from app.render.explorer import ExplorerBuild, ExplorerView
from app.render.notices import RunLimits
from app.schema import DeltaTrace
from app.units import fmt_bytes
from app.web.embed_params import (
    VIEWS,
    EmbedParams,
    ParamError,
    parse_params,
    playground_href,
    resolve_code,
    resolve_pair,
)
from app.web.gates import Refusal
from app.web.pages import (
    Drawn,
    _parse_step,
    html_response,
    posted_form,
    render,
    run_compare,
    run_limits,
    run_posted_code,
)
from app.web.streamed import Streamed

router = APIRouter()

MAX_EDITOR_ROWS = 16  # taller snippets scroll inside the editor; the frame stays a sensible size


def embed_run_context(
    result: DeltaTrace, code: str, step: int | None, which: str, limits: RunLimits
) -> dict[str, Any]:
    """What ``_embed_run.html`` needs (pure)."""
    return _context(build_explorer(result, code, step, limits), which)


def _context(view: ExplorerView, which: str) -> dict[str, Any]:
    return {"view": view, "frame": frame_at(view), "payload": client_payload(view), "which": which}


def _embed_drawn(code: str, step: int | None, which: str, limits: RunLimits) -> Drawn:
    """The embed's fragment from steps fed as the run makes them (``app.web.streamed``)."""
    build = ExplorerBuild()
    return Drawn("_embed_run.html", build.add,
                 lambda result: _context(build.finish(result, code, step, limits), which))


def _error_page(request: Request, error: ParamError, theme: str = "light") -> Response:
    # Framable like every /embed response, so the docs page shows the reason inside its frame.
    body = render("embed_error.html", status=error.status, message=error.message, theme=theme)
    return html_response(body, error.status)


@router.get("/embed", include_in_schema=False)
async def embed_page(request: Request) -> Response:
    """The embed: ``code`` (permalink token) | ``s`` (short link) | ``example``, or a compare:
    ``compare=<slug>`` | ``code`` with ``compare_code`` (two tokens); ``step``, ``view``,
    ``readonly``, ``theme``, ``autorun``. Bad values answer a 400 page that names the parameter."""
    settings = request.app.state.settings
    theme = request.query_params.get("theme", "light")
    try:
        params: EmbedParams = parse_params(request.query_params)
        if params.source.compares:
            pair = resolve_pair(params.source, settings.max_code_bytes)
            assert pair is not None, "a compare source is a pair"
            return await _compare(request, params, pair)
        code = await resolve_code(request.app.state, params.source, settings.max_code_bytes)
    except ParamError as error:
        return _error_page(request, error, theme if theme in ("light", "dark") else "light")
    lines = len(code.rstrip("\n").split("\n"))
    body = render(
        "embed.html", p=params, code=code, rows=min(max(lines, 3), MAX_EDITOR_ROWS),
        step=None if params.step is None else params.step + 1,
        open_href=playground_href(params.source, code, params.step, params.cuda_on_cpu),
        open_base=playground_href(params.source, code, None, params.cuda_on_cpu),
    )
    return html_response(body)


@router.post("/embed/run", include_in_schema=False)
async def embed_run(request: Request) -> Response:
    """Run the posted snippet; answer the embed's ``#run`` fragment for one ``view``."""
    settings = request.app.state.settings
    form, code = await posted_form(request)
    which = form.get("view", "both") or "both"
    if which not in VIEWS:
        return Response(f"view must be one of {', '.join(VIEWS)}", status_code=400, media_type="text/plain")
    step = _parse_step(form.get("step"))

    limits = run_limits(settings)

    def draw(result: DeltaTrace) -> str:
        return render("_embed_run.html", **embed_run_context(result, code, step, which, limits))

    def streamed() -> Streamed[str]:
        return Streamed(lambda: _embed_drawn(code, step, which, limits), draw)

    drawn_as = ("_embed_run.html", str(step), which)
    return html_response(await run_posted_code(request, form, code, draw, streamed, drawn_as))


async def _compare(request: Request, params: EmbedParams, pair: tuple[Example, Example]) -> Response:
    """``/embed?compare=<slug>`` (bug vs fix) or ``?code=…&compare_code=…`` (any two codes): both runs
    drawn at once (two runs of the client's rate, each under a run's budgets)."""
    title = heading(shown(pair[0], pair[1]), shown(pair[1], pair[0]))

    def page(view: CompareView | None = None, problem: tuple[str, str] | None = None) -> str:
        return render("embed_compare.html", p=params, compare=view, which=params.view, problem=problem,
                      compare_peak=fmt_bytes(view.peak) if view else "", title=title,
                      open_href=playground_href(params.source, "", params.step))

    ran = await run_compare(request, pair, params.step, lambda view, _traces: page(view),
                            lambda note: page(problem=(_("Cannot draw this run"), say(note))))
    if isinstance(ran, Refusal):
        refused = html_response(page(problem=(ran.heading, ran.message)), ran.status)
        refused.headers["Retry-After"] = str(ran.retry_after)
        return refused
    return html_response(ran)
