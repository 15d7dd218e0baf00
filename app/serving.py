"""How ``python -m app serve`` runs uvicorn: bounded connections, idle time and request heads.

Every open connection is a descriptor of the server process, and the sandbox pool needs descriptors
too (each pre-forked child arrives as two). Idle or trickling connections must not be able to use
them all, so:

* the process's soft ``RLIMIT_NOFILE`` is raised to its hard limit, and at most ``max_connections``
  connections (fewer when the limit is low: ``FD_RESERVE`` stay for the pool, databases, threads)
  are kept open; one beyond that closes the connection idle the longest (or itself, when none is);
* uvicorn's own ``limit_concurrency`` answers 503 to requests in flight beyond that many;
* a connection must send its request head within ``keep_alive_seconds`` of going idle (uvicorn
  arms that timer only after a first response: here it is armed from the start) and the whole head
  within ``header_seconds`` (slow headers); bodies are bounded by ``app.web.limits``;
* ``h11_max_incomplete_event_size`` bounds a request head's size, ``backlog`` the accept queue;
* an answer must drain: a connection whose client reads nothing of what it was sent for
  ``send_seconds`` (the transport's buffer above its high-water mark all that time) is aborted,
  which drops what it held (``app.web.pacing`` keeps that buffer small, and frees the answer);
* an answer's head goes out in one write with its body's first piece (``HeadWithBody``): uvicorn
  writes them apart, and a replica killed between the two left a head without its body, which no
  proxy can retry (it has passed the head on); killed before that one write, the proxy sees an
  empty answer and retries it on another replica (deploy/haproxy).

Behind a reverse proxy, the proxy's own limits come first; docs/self-host.md says which to set.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
import socket
import struct
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from app.config import Settings

FD_RESERVE = 256


def raise_open_files_limit() -> int:
    """Soft RLIMIT_NOFILE up to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 16)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


class HeadWithBody:
    """A request's view of its connection's transport: the response head is held and written with
    the next write (the body's first piece, or its end), so a small answer leaves in one ``send``.

    uvicorn writes the head at ``http.response.start`` and the body at the next message, with the
    middlewares (and, under load, the scheduler) in between: a process killed there (a crash, an OOM
    kill) leaves the proxy a 200 head whose body never comes (haproxy logs ``SD--``, the client gets
    a cut answer) — a request lost, as no retry can start over an answer already passed on. With the
    head held, a kill before the write leaves the proxy an empty answer, which it retries."""

    def __init__(self, transport: asyncio.Transport, cycle: Any) -> None:
        self._transport, self._cycle = transport, cycle
        self._held = b""
        self._head_seen = False

    def write(self, data: bytes) -> None:
        if not self._head_seen and self._cycle.response_started:
            # uvicorn marks the response started before it writes its head: this write is the head
            self._head_seen, self._held = True, bytes(data)
            return
        if self._held:
            data, self._held = self._held + data, b""
        self._transport.write(data)

    def close(self) -> None:
        if self._held:  # a head with no body (the app failed after starting its answer): as before
            self._transport.write(self._held)
            self._held = b""
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a cap on open connections and deadlines for idle and slow heads."""

    max_connections = 512
    header_seconds = 10.0
    send_seconds = 10.0
    _stalled: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_started = time.monotonic()
        if len(self.connections) > self.max_connections:
            # Full: make room by closing the connection idle the longest (waiting for a request head,
            # as a flood of idle connections does), else refuse this one.
            idle = [c for c in self.connections if c is not self and isinstance(c, BoundedH11Protocol)
                    and c._waiting_for_head() and not c.transport.is_closing()]
            if not idle:
                transport.close()  # connection_lost forgets it
                return
            min(idle, key=lambda c: c._head_started).timeout_keep_alive_handler()
        self._arm_idle_timer()

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        if self.cycle is not None and self.cycle is not before:
            # a new request's cycle, made just now; its task has not run yet
            self.cycle.transport = HeadWithBody(self.transport, self.cycle)

    def _waiting_for_head(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # cancels the idle timer
        if not self._waiting_for_head() or self.transport.is_closing():
            return
        if time.monotonic() - self._head_started > self.header_seconds:
            self.timeout_keep_alive_handler()  # a head trickling in for too long: close
        else:
            self._arm_idle_timer()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.send_seconds, self._send_stalled)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _send_stalled(self) -> None:
        """The client read nothing for ``send_seconds``: drop the connection and what it holds, ours
        and the kernel's (``close`` would wait for the buffer to be read, forever; and a socket closed
        with unsent bytes is kept by the kernel, trying to send them, unless it resets)."""
        self._stalled = None
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._head_started = time.monotonic()  # the next request's head starts now
        super().on_response_complete()

    def _arm_idle_timer(self) -> None:
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` from the settings."""
    open_files = raise_open_files_limit()
    connections = max(16, min(settings.max_connections, open_files - FD_RESERVE))
    protocol = type(
        "BoundedH11Protocol",
        (BoundedH11Protocol,),
        {"max_connections": connections, "header_seconds": settings.header_seconds,
         "send_seconds": settings.send_seconds},
    )
    return {
        "http": protocol,
        # uvicorn counts connections too: one more than we keep, so only requests in flight hit it.
        "limit_concurrency": connections + 1,
        "timeout_keep_alive": settings.keep_alive_seconds,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "backlog": settings.backlog,
        # X-Forwarded-For is read by app.web.clients alone, from EXPLORER_TRUSTED_PROXIES only
        # (uvicorn's default believes it from 127.0.0.1).
        "proxy_headers": False,
    }


def loopback_socket(port: int = 0) -> socket.socket:
    """A TCP socket bound to ``port`` of 127.0.0.1 (0: a free one), not listening yet, for a server
    started with it (``python -m app serve --fd N``, ``pass_fds``; ``uvicorn.Server.run(sockets=...)``
    in process), which listens on it when it is ready: connections are refused until then, as when a
    server binds its port itself. Tests and benches start their servers so. A port found free by
    binding and closing, then handed over as a number, stays free until the server binds it —
    seconds, while it imports torch — and on a machine where other runs start servers and open
    connections (each takes its own end from the same ephemeral range) another may take it meanwhile:
    the server then fails to start, or the caller talks to someone else's. A bound socket keeps the
    port: no other bind, and no connection, can have it. Made as asyncio makes a server's socket
    from a host and a port: protocol IPPROTO_TCP (asyncio sets TCP_NODELAY only on the connections
    of such a socket) and SO_REUSEADDR (its connections inherit it, so a server started again on the
    port binds past those the last one left closing; a port bound as 0 is never a shared one)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        raise
    return sock


def serve_inherited(app: Any, fd: int, **options: Any) -> int:
    """``uvicorn.run(app, **options)`` on an inherited, bound socket, listening or not (``python -m app
    serve --fd N``: socket activation, or a caller that holds its port from the moment it chose it:
    ``loopback_socket``), adopted as it is: uvicorn's own ``fd=`` keeps a second descriptor for it
    and makes it a socket of family AF_UNIX and protocol 0, on whose connections asyncio sets no
    TCP_NODELAY, unlike those of the socket uvicorn makes from ``--host``/``--port``; here it is one
    descriptor, not inherited by anything the server starts, its family and protocol read from the
    descriptor. The exit status ``uvicorn.run`` would give."""
    import uvicorn
    from uvicorn.config import STARTUP_FAILURE

    listener = socket.socket(fileno=fd)  # family, type and protocol: the kernel's
    listener.set_inheritable(False)
    server = uvicorn.Server(uvicorn.Config(app, **options))
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[listener])
    return 0 if server.started else STARTUP_FAILURE
