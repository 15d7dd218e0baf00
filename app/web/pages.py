"""The playground: the page at ``/`` and the ``POST /run`` fragment htmx swaps into it.

All HTML comes from Jinja templates with autoescape on; user strings (names, prints, error messages)
only ever reach the page as escaped text or inside ``<script type="application/json">`` through
``tojson``. The Content-Security-Policy forbids inline scripts and styles altogether.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from app.diagnostics.view import diagnostics_context
from app.gallery import EXAMPLES, get_example
from app.render import build_explorer, client_payload, frame_at
from app.render.explorer import step_label
from app.render.notices import RunLimits
from app.schema import DeltaTrace, RunError
from app.web.gates import Refusal, run_gated
from app.web.permalink import PermalinkError, decode_code

ROOT = Path(__file__).resolve().parents[2]
HTMX = ROOT / "node_modules" / "htmx.org" / "dist" / "htmx.min.js"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; base-uri 'self'; form-action 'self'; object-src 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


router = APIRouter()
templates = Environment(
    loader=FileSystemLoader(ROOT / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.globals["step_label"] = step_label


def render(name: str, **context: Any) -> str:
    return templates.get_template(name).render(**context)


def html_response(body: str, status: int = 200) -> Response:
    """HTML with the security headers (GZipMiddleware compresses the large ones: a 1000-step run is
    megabytes of markup)."""
    headers = {**SECURITY_HEADERS, "Vary": "HX-Request"}
    return Response(body, status_code=status, headers=headers, media_type="text/html; charset=utf-8")


def run_limits(settings: Any) -> RunLimits:
    """The limits the notices quote: the server's settings."""
    return RunLimits(settings.max_steps, settings.wall_seconds, settings.cpu_seconds,
                     settings.max_result_bytes, settings.max_stdout_bytes, settings.memory_mib)


def run_context(result: DeltaTrace, code: str, step: int | None, limits: RunLimits) -> dict[str, Any]:
    """Everything ``_run.html`` needs (pure: the embed mode and tests call it too)."""
    view = build_explorer(result, code, step, limits)
    frame = frame_at(view)
    return {"view": view, "frame": frame, "payload": client_payload(view),
            **diagnostics_context(result, code, frame.step)}


async def posted_form(request: Request) -> tuple[dict[str, str], str]:
    """The posted form and its ``code`` (shared by the page and the embed)."""
    # Form encoding can triple a byte (%E2%80%A6); the exact bound is checked after decoding.
    form = await _form(request, 3 * request.app.state.settings.max_code_bytes + 1024)
    return form, form.get("code", "").replace("\r\n", "\n")  # browsers send textarea lines with CRLF


async def run_posted_code(request: Request, form: dict[str, str], code: str) -> DeltaTrace:
    """Run posted code, or say why not."""
    settings = request.app.state.settings
    if "__too_long__" in form or len(code.encode()) > settings.max_code_bytes:
        result = _rejected(f"The snippet is longer than {settings.max_code_bytes // 1024} KB, the limit.")
    elif not code.strip():
        result = _rejected("There is no code to run: type a snippet or pick an example.")
    else:
        ran = await run_gated(request, code)
        result = ran.as_result() if isinstance(ran, Refusal) else ran
    return result


def _rejected(message: str) -> DeltaTrace:
    return DeltaTrace(ok=False, steps=[], error=RunError(kind="rejected", type="Rejected", message=message))


def _parse_step(raw: str | None) -> int | None:
    """``step`` in URLs and forms counts from 1; the view models count from 0."""
    if raw is None or not raw.strip().isdigit():
        return None
    return max(int(raw) - 1, 0)


async def _form(request: Request, limit: int) -> dict[str, str]:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return {"__too_long__": "1"}
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True, max_num_fields=8)
    return {key: values[0] for key, values in fields.items()}


@router.post("/run", response_class=HTMLResponse)
async def run_fragment(request: Request) -> HTMLResponse:
    """Run the posted snippet and answer the ``_run.html`` fragment (both views, all steps)."""
    settings = request.app.state.settings
    form, code = await posted_form(request)
    result = await run_posted_code(request, form, code)
    step = _parse_step(form.get("step"))
    context = await run_in_threadpool(run_context, result, code, step, run_limits(settings))
    body = await run_in_threadpool(render, "_run.html", **context)
    return html_response(body)


@router.get("/", response_class=HTMLResponse)
async def index(request: Request) -> HTMLResponse:
    """The playground. ``?code=<token>&step=<n>`` is a permalink, ``?s=<id>`` a stored short link
    (``/s/<id>`` sends snippets too long for a URL here), ``?example=<slug>`` a gallery example."""
    params = request.query_params
    settings = request.app.state.settings
    example = get_example(params.get("example", "")) or EXAMPLES[0]
    code, notice, selected = example.code, None, example.slug
    if params.get("code"):
        try:
            code, selected = decode_code(params["code"], settings.max_code_bytes), ""
        except PermalinkError as error:
            notice = f"This link could not be opened: {error} The first example is shown instead."
    elif params.get("s"):
        stored = await _stored_code(request, params["s"])
        if stored is None:
            notice = "This short link does not exist here; the first example is shown instead."
        else:
            code, selected = stored, ""
    step = _parse_step(params.get("step"))
    body = render(
        "index.html", code=code, examples=EXAMPLES, selected=selected, notice=notice,
        step=None if step is None else step + 1, gallery=[_example_json(e) for e in EXAMPLES],
    )
    return html_response(body)


async def _stored_code(request: Request, link_id: str) -> str | None:
    store = getattr(request.app.state, "links", None)
    if store is None:
        return None
    try:
        return await run_in_threadpool(store.get, link_id)  # sqlite / PostgreSQL: blocking
    except Exception:  # noqa: BLE001 - a store that is down is a link that cannot be opened now
        return None


def _example_json(example: Any) -> dict[str, str]:
    return {"slug": example.slug, "title": example.title, "summary": example.summary, "code": example.code}


@router.get("/static/vendor/htmx.min.js", include_in_schema=False, response_model=None)
async def htmx_script() -> FileResponse | PlainTextResponse:
    """htmx from the npm package (``npm ci`` in scripts/setup installs it); never from a CDN."""
    if not HTMX.is_file():
        return PlainTextResponse("htmx is not installed: run scripts/setup (npm ci).", status_code=503)
    return FileResponse(HTMX, media_type="text/javascript", headers={"Cache-Control": "public, max-age=3600"})
