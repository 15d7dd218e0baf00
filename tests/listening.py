"""A loopback port a test's server listens on from the moment the port is chosen.

A port chosen by binding to port 0 and closing, then handed to a server as a number, stays free until
the server binds it — seconds, while the server imports torch — and on a machine where other test runs
start servers and open connections (each connection takes a port from the same ephemeral range),
another may take it meanwhile: the server then fails to bind, or the test talks to someone else's
server. Here the test binds and listens first and hands the socket itself to the server (``python -m
app serve --fd N`` and ``uvicorn --fd N`` with ``pass_fds``; ``uvicorn.Server.run(sockets=...)`` in
this process), and closes its own copy once the server holds it, so a server that is gone refuses
connections as before."""

from __future__ import annotations

import socket

BACKLOG = 128  # the server's own backlog replaces it when it starts listening


def listening_socket() -> socket.socket:
    """A TCP socket bound to a free port of 127.0.0.1, already listening: connections queue on it
    until the server that inherits it accepts them."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", 0))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def port_of(sock: socket.socket) -> int:
    return sock.getsockname()[1]
