"""``GET /render.svg?code=…|s=…|example=…&step=N&view=both|memory|graph&theme=light|dark``.

Runs the snippet like the page does (same runner, same per-client rate and concurrency gates) and
draws one step as a standalone SVG (``app.render.svg``) for an ``<img>``, e.g. in a GitHub README.
Runs are seeded, so the same code draws the same picture: the answer carries an ETag derived from
the run's cache key (``app.web.runcache``: the code, the engine and renderers, the limits, the CPU) and
the picture's parameters, may be cached by proxies, and a small in-process cache spares drawing it
again (the run itself may come from the shared run cache). Problems answer an SVG that states them
(4xx for bad parameters).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app import i18n
from app.budget import current_budget
from app.gallery import Example
from app.i18n import gettext as _
from app.render import build_explorer
from app.render.compare import CompareView, compare_svg, shown
from app.render.layout import DOT_RESERVE
from app.render.notices import RunLimits
from app.render.svg import error_svg, render_svg
from app.run_errors import Message
from app.schema import DeltaTrace, RunError
from app.web.embed_params import EmbedParams, ParamError, parse_params, resolve_code, resolve_pair
from app.web.gates import Refusal, run_gated, run_options
from app.web.pages import run_compare, run_limits
from app.web.runcache import ended_by_itself, volatile

router = APIRouter()

CACHE_ENTRIES = 128
CACHE_CHARS = 16 << 20  # the whole cache, and one picture, in characters (about bytes: SVG is ASCII)
CACHE_ENTRY_CHARS = 512 << 10
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


def _cache(request: Request) -> OrderedDict[str, str]:
    state = request.app.state
    if not hasattr(state, "svg_cache"):
        state.svg_cache = OrderedDict()
    return state.svg_cache


def _pair_key(pair: tuple[Example, Example]) -> str:
    """What a compare picture depends on besides the other parameters: both codes as shown, and
    whether they are a gallery pair (its sides are titled "The bug" / "The fix", two codes' not)."""
    codes = (shown(pair[0], pair[1]).code, shown(pair[1], pair[0]).code)
    return "\0".join(("", "compare", pair[0].slug, *codes))


def _stable(code: str, body: str, errors: tuple[RunError | None, ...]) -> bool:
    """Whether the next drawing would be this one (else it is not kept): every run ended by itself
    (a timeout or a crash may not happen next time), nothing in it differs between processes, and
    the layout was not hurried by the request's budget (``app.render.layout``: below
    ``DOT_RESERVE`` seconds left, a component is placed quickly instead of by dot; the budget only
    ever shrinks, so enough left now means enough left all along)."""
    return (all(ended_by_itself(error) for error in errors) and not volatile(code, body.encode())
            and current_budget().left() >= DOT_RESERVE)


def _draw(result: DeltaTrace, code: str, params: EmbedParams, limits: RunLimits) -> str:
    view = build_explorer(result, code, params.step, limits)
    return render_svg(view, params.step, params.view, params.theme)


def _too_large(theme: str) -> Callable[[object, Message], tuple[str, bool]]:
    def partial(_result: object, note: Message) -> tuple[str, bool]:
        return error_svg(_("Cannot draw this run"), i18n.say(note), theme), False

    return partial


@router.get("/render.svg", include_in_schema=False)
async def render_image(request: Request) -> Response:
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
    cache = _cache(request)
    if etag in cache:
        cache.move_to_end(etag)
        return _svg(cache[etag], cache=CACHEABLE, etag=etag)

    def draw(result: DeltaTrace) -> tuple[str, bool]:
        body = _draw(result, code, params, run_limits(settings))
        return body, _stable(code, body, (result.error,))

    def draw_pair(view: CompareView) -> tuple[str, bool]:
        body = compare_svg(view, params.view, params.theme)
        return body, _stable(code, body, tuple(side.view.error for side in view.sides))

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
    if len(body) <= CACHE_ENTRY_CHARS:  # unique hostile pictures must not fill the server's memory
        cache[etag] = body
    while len(cache) > CACHE_ENTRIES or sum(map(len, cache.values())) > CACHE_CHARS:
        cache.popitem(last=False)
    return _svg(body, cache=CACHEABLE, etag=etag)
