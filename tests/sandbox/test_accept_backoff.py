"""A server out of descriptors tries to accept about once a second and keeps serving the clients it
has: asyncio's selector loop of Python 3.11/3.12 retried up to its backlog (2048) times per readiness
and left a retry behind for each try, a storm of logged failures that grew each second
(``app/web/accept.py``). Counted in the server's own log, over a time measured around the count: a
busy machine fires the retries later, never more often, so the bound holds on any machine."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from sandbox_support import Server, start_starved_server

OPEN_FILES = 96
FAILURE = "socket.accept() out of system resource"


@pytest.fixture(scope="module")
def starved_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_starved_server(tmp_path_factory.mktemp("accept"), OPEN_FILES)
    yield server
    server.stop()


def _failures(server: Server) -> int:
    return server.log.read_text(errors="replace").count(FAILURE)


def _open_files(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_accepts_back_off_while_descriptors_are_out_and_clients_are_served(starved_server: Server) -> None:
    keeper = httpx.Client(base_url=f"http://127.0.0.1:{starved_server.port}", timeout=120)
    flood: list[socket.socket] = []
    try:
        assert keeper.get("/healthz").status_code == 200  # connected before the descriptors run out
        for _ in range(OPEN_FILES * 2):  # idle connections: the server accepts them until it cannot
            flood.append(socket.create_connection(("127.0.0.1", starved_server.port), timeout=5))
        deadline = time.monotonic() + 120  # bounds a server that never accepts, not a race
        while _open_files(starved_server.pid) < OPEN_FILES - 1 or _failures(starved_server) == 0:
            assert time.monotonic() < deadline, "the server never ran out of descriptors"
            time.sleep(0.2)
        started, before = time.monotonic(), _failures(starved_server)
        answers = [keeper.get("/healthz").status_code for _ in range(10)]
        time.sleep(3)
        failed, seconds = _failures(starved_server) - before, time.monotonic() - started
        assert set(answers) <= {200, 503}, answers  # answered (503: no child could be had, said so)
        # one retry a second for the one listening socket; the storm logged thousands a second
        assert failed <= 2 * seconds + 4, f"{failed} failed accepts logged in {seconds:.1f} s"
    finally:
        for sock in flood:
            sock.close()
        keeper.close()
