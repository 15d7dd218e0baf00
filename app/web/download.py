"""``GET /download.html?code=…|s=…|example=…&step=N``: a run as the standalone page, to keep.

The playground's "Download (.html)" button. The snippet runs like the page's does (same runner, same
per-client rate and admission gates, same budget for the server's own work) and the answer is the file
``app.standalone`` writes — the one the library's ``Run.save`` and ``python -m app render`` write:
every style and script inline, nothing fetched, so it opens offline, years later. Sent as an
attachment; opened in place it runs in a sandbox of its own (no access to this site).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from app.i18n import gettext as _
from app.standalone import standalone_html
from app.web.embed_params import ParamError, parse_params, resolve_code, resolve_pair
from app.web.gates import Refusal, run_gated
from app.web.pages import error_page, partial_result, run_limits

router = APIRouter()
FILENAME = "autograd-explorer-run.html"
HEADERS = {
    "Content-Disposition": f'attachment; filename="{FILENAME}"',
    # opened in place rather than saved: its own inline scripts and styles, in an opaque origin
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                               "img-src data:; sandbox allow-scripts",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}


def title_of(code: str) -> str:
    """The page's title: the code's first line that says something."""
    for line in code.split("\n"):
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()[:80]
    return _("A run")


@router.get("/download.html", include_in_schema=False)
async def download(request: Request) -> Response:
    settings = request.app.state.settings
    try:
        params = parse_params(request.query_params)
        if resolve_pair(params.source, settings.max_code_bytes):
            raise ParamError(400, _("Two runs side by side cannot be downloaded as one page yet."))
        code = await resolve_code(request.app.state, params.source, settings.max_code_bytes)
    except ParamError as error:
        return error_page(request, error.status, _("This run cannot be downloaded"), error.message)
    limits = run_limits(settings)
    title = title_of(code)

    def page(result):  # noqa: ANN001, ANN202 - a DeltaTrace; the page's HTML
        return standalone_html(result, code, params.step, limits, title)

    ran = await run_gated(request, code, page, lambda result, note: page(partial_result(result, note)))
    if isinstance(ran, Refusal):
        refused = error_page(request, ran.status, ran.heading, ran.message)
        refused.headers["Retry-After"] = str(ran.retry_after)
        return refused
    return Response(ran.encode("utf-8"), headers=HEADERS, media_type="text/html; charset=utf-8")
