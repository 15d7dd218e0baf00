"""Descriptor exhaustion never wedges the pool: a ``ready`` whose pipes the kernel dropped is a failed
spawn, a stalled spawn is asked for again, ``/healthz`` says when no child can be had, and runs work
again as soon as descriptors are back. The server here is a bare uvicorn (no connection limits of its
own, ``app.serving``), with a low open-files limit, so idle connections really exhaust it."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from sandbox_support import (
    BENIGN,
    Server,
    assert_benign,
    benign_expected,
    fork_server_pid,
    start_starved_server,
)

OPEN_FILES = 96


@pytest.fixture(scope="module")
def starved_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_starved_server(tmp_path_factory.mktemp("starved"), OPEN_FILES)
    yield server
    server.stop()


def _flood(port: int, count: int) -> list[socket.socket]:
    """Idle connections that never send a byte (the kernel completes them even when the server
    cannot accept them any more: they wait in the backlog, then take a descriptor each)."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sockets.append(sock)
    return sockets


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _wait_until(predicate, seconds: float) -> bool:  # noqa: ANN001
    """Poll until ``predicate`` holds; ``seconds`` is a ceiling for a loaded machine (the pool's own
    clock, ``SPAWN_TIMEOUT``, is 5 s), never the time the state is expected in."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def test_runs_come_back_after_descriptor_exhaustion(starved_server: Server) -> None:
    benign_expected()
    assert_benign(starved_server)
    # Two keep-alive connections opened before the flood keep a way in while the server cannot accept.
    keepers = [httpx.Client(base_url=f"http://127.0.0.1:{starved_server.port}", timeout=60) for _ in range(2)]
    try:
        assert all(keeper.get("/healthz").status_code == 200 for keeper in keepers)
        flood = _flood(starved_server.port, OPEN_FILES * 2)
        # the server accepts what it can, until its descriptors run out (then EMFILE)
        assert _wait_until(lambda: _open_files(starved_server.pid) >= OPEN_FILES - 1, 60)
        # Two runs at once: each takes a pre-forked child, and a busy pool asks for the replacement at
        # once (an idle one only when the run has ended, its own pipes closed), whose pipes the kernel
        # cannot hand over now: the runs still answer (no 45 s wait), and the pool counts the loss.
        with ThreadPoolExecutor(2) as runs:
            for _ in range(4):
                for answer in runs.map(lambda keeper: keeper.post("/api/run", json={"code": BENIGN}),
                                       keepers):
                    assert answer.status_code in (200, 503), answer.status_code
        for sock in flood:
            sock.close()
        assert _wait_until(lambda: keepers[0].get("/healthz").status_code == 200, 60), \
            keepers[0].get("/healthz").text
    finally:
        for keeper in keepers:
            keeper.close()
    # Descriptors are back: runs work at once (no restart, no wedge), and nothing is left waiting.
    assert_benign(starved_server)
    assert_benign(starved_server)
    assert starved_server.health().json()["pool"]["spawns_pending"] <= 2
    assert "arrived without its pipes" in Path(starved_server.log).read_text()


def test_health_fails_while_no_child_can_be_had(starved_server: Server) -> None:
    forker = fork_server_pid(starved_server)
    os.kill(forker, signal.SIGSTOP)  # a fork server that answers nothing: spawns stall
    try:
        # The pre-forked children are used up; then no child can be had, and health says so.
        for _ in range(3):
            starved_server.client.post("/api/run", json={"code": BENIGN}, timeout=60)
        assert _wait_until(lambda: starved_server.health().status_code == 503, 60)
        health = starved_server.health().json()
        assert health["ok"] is False and health["state"] == "no children"
    finally:
        os.kill(forker, signal.SIGCONT)
    # The stalled spawns are asked for again: health and runs recover by themselves.
    assert _wait_until(lambda: starved_server.health().status_code == 200, 60)
    assert_benign(starved_server)
    assert fork_server_pid(starved_server) == forker  # healed, not restarted
