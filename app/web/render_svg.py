"""``GET /render.svg?code=…|s=…|example=…&step=N&view=both|memory|graph&theme=light|dark``.

Runs the snippet like the page does (same runner, same per-client rate and concurrency gates) and
draws one step as a standalone SVG (``app.render.svg``) for an ``<img>``, e.g. in a GitHub README.
Runs are seeded, so the same code draws the same picture: the answer carries an ETag derived from
the run's cache key (``app.web.runcache``: the code, the engine and renderers, the limits, the CPU) and
the picture's parameters, may be cached by proxies, and this process keeps the pictures it drew
(``gates.Drawing``; the run itself may come from the shared run cache). Problems answer an SVG that
states them (4xx for bad parameters).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app import i18n
from app.gallery import Example
from app.i18n import gettext as _
from app.render import build_explorer
from app.render.compare import CompareView, compare_svg, shown
from app.render.notices import RunLimits
from app.render.svg import error_svg, render_svg
from app.run_errors import Message
from app.schema import DeltaTrace, RunError
from app.web.embed_params import EmbedParams, ParamError, parse_params, resolve_code, resolve_pair
from app.web.gates import Drawing, Refusal, drawn_steadily, run_gated, run_options
from app.web.pages import run_compare, run_limits
from app.web.runcache import volatile

router = APIRouter()

CACHEABLE = "public, max-age=86400"
# Opened directly (not in an <img>), the file is a document: allow it nothing but its own look.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; sandbox",
    "X-Content-Type-Options": "nosniff",
    "Content-Disposition": 'inline; filename="autograd-explorer.svg"',
}


def _svg(body: str, status: int = 200, cache: str = "no-store", etag: str | None = None,
         retry_after: int | None = None) -> Response:
    # The picture's words are in the request's language: lang= in the URL, else the reader's own.
    headers = {**HEADERS, "Cache-Control": cache, "Vary": "Accept-Language, Cookie",
               "Content-Language": i18n.current_tag()}
    if etag:
        headers["ETag"] = etag
    if retry_after:
        headers["Retry-After"] = str(retry_after)
    return Response(body.encode("utf-8"), status_code=status, headers=headers, media_type="image/svg+xml")


def _etag(request: Request, code: str, params: EmbedParams) -> str:
    key = "\0".join((request.app.state.run_cache.key(code, run_options(params.cuda_on_cpu)), str(params.step),
                     params.view, params.theme, i18n.current_locale()))
    return '"' + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32] + '"'


def _pair_key(pair: tuple[Example, Example]) -> str:
    """What a compare picture depends on besides the other parameters: both codes as shown, and
    whether they are a gallery pair (its sides are titled "The bug" / "The fix", two codes' not)."""
    codes = (shown(pair[0], pair[1]).code, shown(pair[1], pair[0]).code)
    return "\0".join(("", "compare", pair[0].slug, *codes))


def _stable(code: str, body: str, errors: tuple[RunError | None, ...]) -> bool:
    """Whether the next drawing would be this one (else it is neither cached nor kept): every run ended
    by itself and the work was not hurried (``gates.drawn_steadily``), and nothing in the picture
    differs between processes (an object's address)."""
    return drawn_steadily(*errors) and not volatile(code, body.encode())


def _draw(result: DeltaTrace, code: str, params: EmbedParams, limits: RunLimits) -> str:
    view = build_explorer(result, code, params.step, limits)
    return render_svg(view, params.step, params.view, params.theme)


def _too_large(theme: str) -> Callable[[object, Message], tuple[str, bool]]:
    def partial(_result: object, note: Message) -> tuple[str, bool]:
        return error_svg(_("Cannot draw this run"), i18n.say(note), theme), False

    return partial


@router.api_route("/render.svg", methods=["GET", "HEAD"], include_in_schema=False)
async def render_image(request: Request) -> Response:
    """The picture of one step. HEAD (link checkers, previews) says whether the link is good and the
    picture's headers without running the snippet: a drawn picture's own, or, not drawn yet, its type
    and ETag (issue 27)."""
    settings = request.app.state.settings
    theme = request.query_params.get("theme", "light")
    theme = theme if theme in ("light", "dark") else "light"
    try:
        params = parse_params(request.query_params)
        pair = resolve_pair(params.source, settings.max_code_bytes)
        code = (_pair_key(pair) if pair else
                await resolve_code(request.app.state, params.source, settings.max_code_bytes))
    except ParamError as error:
        titles = {400: _("Bad image link"), 404: _("Unknown short link"), 503: _("Not available")}
        return _svg(error_svg(titles.get(error.status, _("Error")), error.message, theme), error.status)
    etag = _etag(request, code, params)
    if etag in [tag.strip() for tag in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers={"ETag": etag, "Cache-Control": CACHEABLE})
    # A picture this process drew before: no token, no run, no drawing.
    drawing = Drawing.of(request, code, run_options(params.cuda_on_cpu), "render.svg", str(params.step),
                         params.view, params.theme)
    if drawing is not None and (drawn := await drawing.lookup()) is not None:
        return _svg(drawn, cache=CACHEABLE, etag=etag)
    if request.method == "HEAD":
        return _svg("", etag=etag)  # no body is sent for a HEAD; the snippet is not run for one

    def kept(body: str, errors: tuple[RunError | None, ...]) -> tuple[str, bool]:
        stable = _stable(code, body, errors)
        if drawing is not None:
            drawing.steady = stable
        return body, stable

    def draw(result: DeltaTrace) -> tuple[str, bool]:
        return kept(_draw(result, code, params, run_limits(settings)), (result.error,))

    def draw_pair(view: CompareView, traces: tuple[DeltaTrace, ...]) -> tuple[str, bool]:
        return kept(compare_svg(view, params.view, params.theme), tuple(trace.error for trace in traces))

    # The page's gates, answered as image statuses: 429 (rate), 503 (busy or no sandbox); a compare
    # is two runs (``run_compare``).
    too_large = _too_large(params.theme)
    if pair:
        ran = await run_compare(request, pair, params.step, draw_pair, lambda note: too_large(None, note))
    else:
        ran = await run_gated(request, code, draw, too_large, cuda_on_cpu=params.cuda_on_cpu)
    if isinstance(ran, Refusal):
        return _svg(error_svg(ran.heading, ran.message, params.theme), ran.status,
                    retry_after=ran.retry_after)
    body, stable = ran
    if not stable:
        return _svg(body)
    if drawing is not None:
        drawing.keep(body)  # in the process's run cache, bounded in bytes (EXPLORER_CACHE_MIB)
    return _svg(body, cache=CACHEABLE, etag=etag)
