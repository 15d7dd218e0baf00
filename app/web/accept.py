"""Out of descriptors, the server tries to accept once a second, as asyncio means to.

On Python 3.11 and 3.12, asyncio's selector loop answers a failed ``accept()`` (EMFILE, ENFILE,
ENOBUFS, ENOMEM) by taking its reader off the listening socket and asking to start serving again in a
second, and then goes on trying: up to ``backlog`` times for one readiness (uvicorn's is 2048). Each
try logs a traceback and leaves one more retry behind, and every retry that fires re-arms the socket
for another round, so a server out of descriptors spends its event loop on a storm of retries: 505,769
logged failures in one test run on a busy machine, while the runs of clients already connected timed
out. CPython fixed it (gh-151615: stop the loop once the retry is scheduled); 3.11 and 3.12 take
security fixes only, so this backports the fix onto the running loop.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import sys
from asyncio import constants, selector_events, trsock
from types import MethodType
from typing import Any

_RESOURCE_ERRORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
_STDLIB_ACCEPT = selector_events.BaseSelectorEventLoop._accept_connection


def _accept_connection(self: selector_events.BaseSelectorEventLoop, protocol_factory: Any, sock: Any,
                       sslcontext: Any = None, server: Any = None, backlog: int = 100,
                       ssl_handshake_timeout: float | None = constants.SSL_HANDSHAKE_TIMEOUT,
                       ssl_shutdown_timeout: float | None = constants.SSL_SHUTDOWN_TIMEOUT) -> None:
    """``BaseSelectorEventLoop._accept_connection`` of 3.11/3.12 with the fix of gh-151615."""
    for _ in range(backlog):
        try:
            conn, addr = sock.accept()
            conn.setblocking(False)
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return  # nothing more waits to be accepted
        except OSError as exc:
            if exc.errno not in _RESOURCE_ERRORS:
                raise  # the loop logs it and goes on
            self.call_exception_handler({
                "message": "socket.accept() out of system resource",
                "exception": exc,
                "socket": trsock.TransportSocket(sock),
            })
            # Linux keeps the socket readable: stop listening, try again in a while, and stop trying now.
            self._remove_reader(sock.fileno())
            self.call_later(constants.ACCEPT_RETRY_DELAY, self._start_serving, protocol_factory, sock,
                            sslcontext, server, backlog, ssl_handshake_timeout, ssl_shutdown_timeout)
            return
        else:
            accept = self._accept_connection2(protocol_factory, conn, {"peername": addr}, sslcontext, server,
                                              ssl_handshake_timeout, ssl_shutdown_timeout)
            self.create_task(accept)


def install(loop: asyncio.AbstractEventLoop) -> bool:
    """Give ``loop`` the fixed accept before it starts serving; True when it needed it. Only the
    stdlib selector loop of the two versions whose code this copies (another loop, or a later Python,
    keeps its own)."""
    if sys.version_info[:2] not in ((3, 11), (3, 12)):
        return False
    if getattr(type(loop), "_accept_connection", None) is not _STDLIB_ACCEPT:
        return False
    ours, theirs = inspect.signature(_accept_connection), inspect.signature(_STDLIB_ACCEPT)
    if ours.parameters.keys() != theirs.parameters.keys():
        return False  # a patch release changed what the loop passes: keep the loop's own
    loop._accept_connection = MethodType(_accept_connection, loop)  # type: ignore[attr-defined]
    return True
