"""Short links over HTTP: ``POST /api/links``, ``GET /api/links/<id>`` and ``GET /s/<id>``.

The database work is blocking (sqlite3, psycopg), so it runs in the thread pool.
"""

from __future__ import annotations

import json
import logging
import math
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, RedirectResponse, Response

from app.i18n import MAX_TAG, N_
from app.i18n import gettext as _
from app.shortlinks import (
    InvalidSnippet,
    LinkStore,
    QuotaExceeded,
    StoreFull,
    StoreUnavailable,
    prepare_snippet,
)
from app.web.clients import client_key
from app.web.gates import take_token
from app.web.pages import error_page
from app.web.permalink import encode_code

router = APIRouter()

# A stored id never changes its code, so its JSON may be cached for good.
IMMUTABLE = "public, max-age=31536000, immutable"
MAX_REDIRECT_TOKEN = 8000
MAX_STEP_DIGITS = 7
UNAVAILABLE = N_("Short links are unavailable right now; try again in a moment.")
log = logging.getLogger(__name__)


def _store(request: Request) -> LinkStore:
    return request.app.state.links


def _problem(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def _unavailable(error: StoreUnavailable) -> JSONResponse:
    # The cause (paths, host names) goes to the log, not to the client.
    log.warning("short links unavailable: %s", error)
    return JSONResponse({"detail": _(UNAVAILABLE)}, status_code=503, headers={"Retry-After": "5"})


def playground_url(link_id: str, code: str) -> str:
    """Where ``/s/<id>`` sends the browser: the playground permalink that carries the code itself.

    A snippet whose compressed token would make the URL too long for common proxies and servers
    (uvicorn's h11 parser refuses request heads over 16 KiB) goes by id instead: ``/?s=<id>``, which the page
    resolves through ``GET /api/links/<id>``.
    """
    token = encode_code(code)
    if len(token) > MAX_REDIRECT_TOKEN:
        return "/?" + urlencode({"s": link_id})
    return "/?" + urlencode({"code": token})


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing to buffer more than ``limit`` bytes (a 413 before any parsing)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise InvalidSnippet(413, _("The request body is larger than {limit} bytes.").format(limit=limit))
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise InvalidSnippet(413, _("The request body is larger than {limit} bytes.").format(limit=limit))
    return bytes(body)


def _code_from_body(body: bytes) -> str:
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSnippet(400, _("The request body is not valid UTF-8.")) from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        raise InvalidSnippet(400, 'The request body is not valid JSON; send {"code": "..."}.') from None
    if not isinstance(data, dict) or set(data) != {"code"}:
        raise InvalidSnippet(422, 'Send a JSON object with exactly one field: {"code": "..."}.')
    if not isinstance(data["code"], str):
        raise InvalidSnippet(422, "`code` must be a string.")
    return data["code"]


@router.post("/api/links")
async def create_link(request: Request) -> JSONResponse:
    """Store a snippet; the same code always gets the same id. The answer is the same whether the
    snippet was stored already or not (200), so it tells no one what others shared. Within the
    store's bounds (``app.shortlinks.store``): a client past its day's quota gets 429, a full store
    507, each with a sentence that says so."""
    max_code = request.app.state.settings.max_code_bytes
    if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        return _problem(415, _("Send the snippet as JSON (Content-Type: application/json)."))
    # Storing is cheap but not free (disk): a share spends the same per-client budget as a run.
    refused = await take_token(request)
    if refused is not None:
        seconds = refused.retry_after
        detail = _("Too many requests; please wait {seconds} s.").format(seconds=seconds)
        return JSONResponse({"detail": detail}, status_code=429,
                            headers={"Retry-After": str(seconds)})
    try:
        # JSON escapes can take up to 6 bytes per UTF-8 byte ("\u00e9" for two bytes); the exact
        # bound on the code itself is checked after decoding.
        code = _code_from_body(await _read_body(request, 6 * max_code + 1024))
        snippet = prepare_snippet(code, max_code)
        link_id, _created = await run_in_threadpool(_store(request).put, snippet, client_key(request))
    except InvalidSnippet as error:
        return _problem(error.status, error.message)
    except QuotaExceeded as error:
        limits = _store(request).limits
        hours = math.ceil(error.retry_after / 3600)
        detail = _("You have shared as much as one day allows here ({links} links or {kb} KB); you can share "
                   "again in {hours} h. The link above works without a short one.").format(
            links=limits.client_links, kb=limits.client_bytes // 1024, hours=hours)
        return JSONResponse({"detail": detail}, status_code=429,
                            headers={"Retry-After": str(math.ceil(error.retry_after))})
    except StoreFull:
        log.warning("short links: the store is full (EXPLORER_LINKS_MAX_BYTES)")
        return _problem(507, _("This server keeps no more short links for now. The link above works "
                               "without a short one."))
    except StoreUnavailable as error:
        return _unavailable(error)
    return JSONResponse({"id": link_id, "url": f"/s/{link_id}"})


async def _lookup(request: Request, link_id: str) -> str | None:
    return await run_in_threadpool(_store(request).get, link_id.lower())


@router.get("/api/links/{link_id}")
async def read_link(link_id: str, request: Request) -> JSONResponse:
    """The stored code as JSON, for the playground page and API clients."""
    try:
        code = await _lookup(request, link_id)
    except StoreUnavailable as error:
        return _unavailable(error)
    if code is None:
        return _problem(404, _("No short link with this id."))
    return JSONResponse({"id": link_id.lower(), "code": code}, headers={"Cache-Control": IMMUTABLE})


@router.get("/s/{link_id}", response_model=None)
async def follow_link(link_id: str, request: Request) -> Response:
    """303 to the playground carrying the snippet (``?step=N`` travels along); an unknown id gets
    the error page (or JSON)."""
    try:
        code = await _lookup(request, link_id)
    except StoreUnavailable as error:
        log.warning("short links unavailable: %s", error)
        return _error_page(request, 503, _("Short links are unavailable right now"), _(UNAVAILABLE))
    if code is None:
        return _error_page(request, 404, _("This short link does not exist"),
                           _("No snippet is stored under this id on this server."))
    url = playground_url(link_id.lower(), code)
    step = request.query_params.get("step", "")
    if step.isdecimal() and len(step) <= MAX_STEP_DIGITS and int(step) >= 1:
        url += f"&step={int(step)}"
    if "lang" in request.query_params:  # /s/<id>?lang=zh-CN opens the playground in that language
        url += "&" + urlencode({"lang": request.query_params["lang"][:MAX_TAG]})
    return RedirectResponse(url, status_code=303)


def _error_page(request: Request, status: int, title: str, message: str) -> Response:
    if "application/json" in request.headers.get("accept", ""):
        return _problem(status, f"{title}: {message}" if status != 503 else message)
    return error_page(request, status, title, message)

