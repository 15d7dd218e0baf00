"""Clients that never read their answer cannot pin the server's memory (issue 25, hole 5), on a real
``python -m app serve`` with real sockets that ask for an 8 MB v1 answer and never read it: the
server drops them once nothing was read for ``EXPLORER_SEND_SECONDS``, hands the memory back, and one
client's unread answers hold at most ``EXPLORER_CLIENT_PENDING_BYTES`` (the newest past it is given
up at once). Before, 20 such clients held +108 MiB, still held after they left.

The waits poll for what the server does, up to deadlines many times what it needs; memory is the
server's resident set (``/proc``), compared with its own before the flood."""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import Server, start_server

# ~8 MB of v1 JSON: 2,500 tensors alive through eight steps
BIG = "ts = [torch.ones(1) for _ in range(2500)]\n" + "".join(f"a{i} = {i}\n" for i in range(7))
ESTABLISHED, CLOSED = 1, 7  # tcpi_state


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _state(sock: socket.socket) -> int:
    return struct.unpack("B", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0]


def _asks(port: int, count: int) -> list[socket.socket]:
    """``count`` connections that each ask for the big answer, then read nothing."""
    body = json.dumps({"code": BIG}).encode()
    head = (f"POST /api/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel takes little of it
        sock.connect(("127.0.0.1", port))
        sock.sendall(head + body)
        socks.append(sock)
    return socks


def _until(condition, seconds: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.25)
    return condition()


def _received(sock: socket.socket) -> int:
    """What the server sent before it dropped the connection (read now, at last)."""
    sock.settimeout(5)
    total = 0
    try:
        while chunk := sock.recv(1 << 20):
            total += len(chunk)
    except (ConnectionResetError, TimeoutError):
        pass
    sock.close()
    return total


def _server(tmp_path_factory: pytest.TempPathFactory, send_seconds: str, pending: int) -> Server:
    env = {"EXPLORER_SEND_SECONDS": send_seconds, "EXPLORER_CLIENT_PENDING_BYTES": str(pending),
           "EXPLORER_MAX_QUEUED": "16", "EXPLORER_QUEUE_WAIT_SECONDS": "120",
           "EXPLORER_WALL_SECONDS": "20", "EXPLORER_CPU_SECONDS": "20"}
    server = start_server(tmp_path_factory.mktemp("slow"), env, serve=True)
    whole = server.client.post("/api/run", json={"code": BIG}, timeout=120)
    assert whole.status_code == 200 and len(whole.content) > 7 << 20  # the answer is as big as meant
    return server


@pytest.fixture(scope="module")
def dropping(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Drops a client after 2 s without reading; no cap that would give up answers first."""
    server = _server(tmp_path_factory, "2", 1 << 30)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Waits ten minutes for a reader, but holds at most 12 MiB of one client's unread answers."""
    server = _server(tmp_path_factory, "600", 12 << 20)
    yield server
    server.stop()


def test_clients_that_never_read_are_dropped_and_their_memory_handed_back(dropping: Server) -> None:
    before = _rss_mib(dropping.pid)
    socks = _asks(dropping.port, 10)
    assert _until(lambda: all(_state(s) != ESTABLISHED for s in socks), 240), \
        [_state(s) for s in socks]
    assert dropping.health().status_code == 200
    sent = [_received(sock) for sock in socks]
    assert all(size < 7 << 20 for size in sent), sent  # none got its whole answer: dropped
    assert _until(lambda: _rss_mib(dropping.pid) - before < 24, 30), _rss_mib(dropping.pid) - before
    assert dropping.client.post("/api/run", json={"code": "x = torch.ones(2)\n"}).status_code == 200


def test_one_clients_unread_answers_are_capped(capped: Server) -> None:
    """Of four unread 8 MB answers to one client, one is held (the cap is 12 MiB), and the three
    others are given up as soon as they are made; nothing would drop them for ten minutes else."""
    socks = _asks(capped.port, 4)
    assert _until(lambda: sum(_state(s) != ESTABLISHED for s in socks) >= 3, 240), \
        [_state(s) for s in socks]
    assert sum(_state(s) == ESTABLISHED for s in socks) == 1
    assert capped.health().status_code == 200
    for sock in socks:
        sock.close()
