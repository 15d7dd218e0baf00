"""Request bodies are bounded before any route reads them: by size and by the time they take to arrive.

One ASGI middleware for every route, so a new route cannot forget it:

* a query of more fields than any route reads (``MAX_QUERY_FIELDS``) answers 400 before it is parsed;
* a ``Content-Length`` above the cap answers 413 at once, before a byte of the body is read;
* a body sent without a length (chunked) is counted as it streams: past the cap, reading raises a 413;
* the whole body must arrive within ``body_seconds`` (a client trickling bytes holds a connection and
  a descriptor; past the deadline, reading raises a 408).

Routes still check their own, smaller bounds (the snippet's bytes) after decoding. The middleware
also reports where a request's time went, as ``Server-Timing: sandbox;dur=<ms>, work;dur=<ms>``:
the wait for the sandbox's runs, their answers read and validated included (``app.web.gates``), and
the server's budgeted work on them (``app.web.work``); with the run cache, ``cache;desc="hit"|"miss"``
(the lookup) and, for a hit, ``saved`` (the sandbox time the cached runs took when they were made).
All are measured by the server, never told by a child, so the per-request budget — and what a run
costs beyond the server's own work — can be observed from outside.
"""

from __future__ import annotations

import asyncio
import json
import time

from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.i18n import gettext as _

WORK_KEY = "explorer.work_seconds"  # scope key: seconds of budgeted server work (app.web.work)
SANDBOX_KEY = "explorer.sandbox_seconds"  # scope key: seconds waiting for the sandbox (app.web.gates)
CACHE_KEY = "explorer.cache_seconds"  # scope key: seconds looking in the run cache (app.web.runcache)
SAVED_KEY = "explorer.saved_seconds"  # scope key: the sandbox seconds the runs a cache answered took
CACHE_DESC_KEY = "explorer.cache_outcome"  # scope key: "hit" (every run answered by the cache), "miss"
# Server-Timing's entries, in this order: its name, the scope key of its seconds, of its description
TIMINGS = (("sandbox", SANDBOX_KEY, None), ("cache", CACHE_KEY, CACHE_DESC_KEY), ("saved", SAVED_KEY, None),
           ("work", WORK_KEY, None))


# The most query fields a request may carry: no route reads more than a dozen (the embed's and the
# picture's: the code's source, step, view, theme, readonly, autorun, cuda, lang), and docs tools append
# a few of their own (utm_*). Counted as Python's parse_qsl counts them (1 + the ampersands), before
# starlette parses any: it unquotes every field, ~13-20 ms for the 3,750 a 16 KiB head can hold.
MAX_QUERY_FIELDS = 64


class TooManyFields(HTTPException):
    def __init__(self) -> None:
        message = _("The address has more than {limit} query fields; no page here reads that many.").format(
            limit=MAX_QUERY_FIELDS)
        super().__init__(400, message, {"Connection": "close"})


class BodyTooLarge(HTTPException):
    def __init__(self, limit: int) -> None:
        message = _("The request body is larger than {limit} bytes.").format(limit=limit)
        super().__init__(413, message, {"Connection": "close"})


class BodyTooSlow(HTTPException):
    def __init__(self, seconds: float) -> None:
        message = _("The request body did not arrive within {seconds:g} s.").format(seconds=seconds)
        super().__init__(408, message, {"Connection": "close"})


class RequestLimits:
    def __init__(self, app: ASGIApp, max_body_bytes: int, body_seconds: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_seconds = body_seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope.get("query_string", b"").count(b"&") >= MAX_QUERY_FIELDS:
            await _refuse(send, TooManyFields())
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_body_bytes:
            await _refuse(send, BodyTooLarge(self.max_body_bytes))
            return
        started = False
        limit, seconds = self.max_body_bytes, self.body_seconds
        deadline = time.monotonic() + seconds
        received = 0
        body_done = False

        async def bounded_receive() -> Message:
            nonlocal received, body_done
            if body_done:
                return await receive()  # disconnect polling after the body: no deadline
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BodyTooSlow(seconds) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge(limit)
                body_done = not message.get("more_body", False)
            else:
                body_done = True
            return message

        async def send_with_timing(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                timings = [f"{name};{_desc(scope, desc)}dur={scope[key] * 1000:.1f}"
                           for name, key, desc in TIMINGS if key in scope]
                if timings:
                    MutableHeaders(scope=message).append("Server-Timing", ", ".join(timings))
            await send(message)

        try:
            await self.app(scope, bounded_receive, send_with_timing)
        except (BodyTooLarge, BodyTooSlow) as error:  # raised where no exception handler saw it
            if not started:
                await _refuse(send, error)


def _desc(scope: Scope, key: str | None) -> str:
    return f'desc="{scope[key]}";' if key is not None and key in scope else ""


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() and len(text) < 20 else None
    return None


async def _refuse(send: Send, error: HTTPException) -> None:
    body = json.dumps({"detail": error.detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})
