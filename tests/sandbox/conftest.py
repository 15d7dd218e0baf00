"""Real servers for the sandbox tests: uvicorn subprocesses with the default (fork-server) runner.

Two of them for the whole session: one with the policy gate, one without it (a test-only setting), so
that every attack is shown to be stopped by the OS layers alone too.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from sandbox_support import Server, start_server


@pytest.fixture(scope="session")
def gated_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("gated"), {}, gate=True)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def ungated_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("ungated"), {}, gate=False)
    yield server
    server.stop()


@pytest.fixture(params=["gate-on", "gate-off"])
def server(request: pytest.FixtureRequest) -> Server:
    return request.getfixturevalue("gated_server" if request.param == "gate-on" else "ungated_server")


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback listener that an attack must never reach."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    yield sock
    sock.close()
