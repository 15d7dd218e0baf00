"""Answers go out as fast as their client reads them, and no client can make the server hold much.

A large answer (a v1 trace is up to 8 MiB, a page's fragment 3-4 MB) is handed to the server
``CHUNK`` bytes at a time, each piece once the client has read the last: uvicorn's flow control
waits while the transport's buffer is above its high-water mark. Handed on whole, the rest of it sat
in the transport's buffer, a copy of the answer per client that never read, kept as long as the
connection lived (20 such clients held +108 MiB, still held after they left). Now:

* the transport holds about one piece per client;
* a client that reads nothing for ``EXPLORER_SEND_SECONDS`` is dropped (``app.serving``), which ends
  the wait, and the answer is freed;
* the answers one client (``app.web.clients.client_key``) has not read yet hold at most
  ``EXPLORER_CLIENT_PENDING_BYTES`` together: past that, the newest is given up (its connection
  closed);
* when a large answer that had to wait for its client ends, however it ends, the memory it held is
  handed back to the system (``malloc_trim``), so it is not kept after the client is gone.

The work that made the answer is not held meanwhile: it is freed beside the answer's hand-over
(``app.web.after``, inside this middleware), not after the client has read it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.heap import trim_heap
from app.web.clients import client_key

CHUNK = 64 * 1024  # uvicorn's transport pauses writing above 64 KiB: one piece at a time
LARGE = 1 << 20  # an answer from this size on is handed back to the system once it waited
WAITED = 0.2  # seconds one piece may take to go before the answer counts as having waited


class _GivenUp(Exception):  # noqa: N818
    """The client's unread answers hold more than they may: this one is not sent on."""


class Paced:
    """The ASGI middleware that hands answers on piece by piece (see the module)."""

    def __init__(self, app: ASGIApp, client_pending_bytes: int) -> None:
        self.app = app
        self.client_pending_bytes = client_pending_bytes
        self.pending: dict[str, int] = {}  # client -> bytes of its answers not handed on yet

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        waited = large = False

        async def paced(message: Message) -> None:
            nonlocal waited, large
            body = message.get("body", b"")
            if message["type"] != "http.response.body" or len(body) <= CHUNK:
                await send(message)
                return
            more = message.get("more_body", False)
            large = large or len(body) >= LARGE
            client = client_key(HTTPConnection(scope))
            left = len(body)
            self._add(client, left)
            try:
                if self.pending[client] > self.client_pending_bytes:
                    raise _GivenUp
                for start in range(0, len(body), CHUNK):
                    piece = body[start:start + CHUNK]
                    began = time.monotonic()
                    await send({"type": "http.response.body", "body": piece,
                                "more_body": more or start + CHUNK < len(body)})
                    waited = waited or time.monotonic() - began > WAITED
                    left -= len(piece)
                    self._add(client, -len(piece))
            finally:
                self._add(client, -left)

        try:
            await self.app(scope, receive, paced)
        except _GivenUp:
            pass  # uvicorn closes a connection whose answer was not completed
        finally:
            if large and waited:
                _hand_back()

    def _add(self, client: str, size: int) -> None:
        total = self.pending.get(client, 0) + size
        if total > 0:
            self.pending[client] = total
        else:
            self.pending.pop(client, None)


def _hand_back() -> None:
    """The answer is gone: hand the memory back, in a worker thread (the trim walks the heap)."""
    with contextlib.suppress(RuntimeError):  # no loop or executor left: the server is stopping
        asyncio.get_running_loop().run_in_executor(None, trim_heap)
