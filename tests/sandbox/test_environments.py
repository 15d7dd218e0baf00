"""The same sandbox as root, as a non-root user, and under a Docker-like seccomp profile and capability
set (see ``launcher.py``); and the fail-closed start when a required layer is missing."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_support import SECRET, Server, assert_benign, assert_no_strays, start_server, text

LAUNCHER = str(Path(__file__).with_name("launcher.py"))
# The launcher changes uid and loads a filter without no_new_privs: it needs root (as CI has).
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the environment launcher needs root")
NOBODY = 65534

# A cross-section of the corpus: what differs between the environments is who may read, signal or
# trace whom, so these go through each of them with the gate off (the OS layers alone).
CROSS_SECTION = {
    "environ": ("import os\nprint(os.environ.get('EXPLORER_TEST_SECRET'))", "None"),
    "proc-environ": ("print(open('/proc/self/environ', 'rb').read())", "Permission denied"),
    "server-environ": ("print(open('/proc/SERVER_PID/environ', 'rb').read())", "Permission denied"),
    "server-mem": ("print(open('/proc/SERVER_PID/mem', 'rb').read(1))", "Permission denied"),
    "kill-server": ("import os\nos.kill(SERVER_PID, 9)", "Operation not permitted"),
    "ptrace-server": (
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print('rc', libc.ptrace(16, SERVER_PID, 0, 0), ctypes.get_errno())",
        "rc -1 1",
    ),
    "sigio-server": (
        "import fcntl, os\nr, w = os.pipe()\nfcntl.fcntl(r, fcntl.F_SETOWN, SERVER_PID)",
        "Operation not permitted",
    ),
    "renice-server": (
        "import os\nos.setpriority(os.PRIO_PROCESS, SERVER_PID, 19)",
        "Operation not permitted",
    ),
    "prlimit-server": (
        "import resource\nresource.prlimit(SERVER_PID, resource.RLIMIT_NOFILE, (0, 0))",
        "Operation not permitted",
    ),
    "app-source": ("print(open('/work/main/app/config.py').read())", "Permission denied"),
    "passwd": ("print(open('/etc/passwd').read())", "Permission denied"),
    "write-tmp": ("open('/tmp/explorer-env-probe', 'w')", "Permission denied"),
    "socket": ("import socket\nsocket.socket()", "Operation not permitted"),
    "fork": ("import os\nos.fork()", "Operation not permitted"),
    "unshare": ("import ctypes\nprint('rc', ctypes.CDLL(None).unshare(0x10000000))", "rc -1"),
    "memory": ("x = torch.empty(10 ** 11)", "out of memory"),
}


def _server(
    name: str, prefix_options: list[str], user: int | None, env: dict | None = None
) -> Iterator[Server]:
    workdir = Path(tempfile.mkdtemp(prefix=f"explorer-{name}-"))  # reachable by a non-root server
    prefix = [sys.executable, LAUNCHER, *prefix_options, *(["--user", str(user)] if user else []), "--"]
    server = start_server(workdir, {**(env or {})}, gate=False, prefix=prefix, user=user)
    yield server
    server.stop()
    shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="module", params=["non-root", "docker-root", "docker-non-root"])
def environment(request: pytest.FixtureRequest) -> Iterator[tuple[str, Server]]:
    options = {"non-root": [], "docker-root": ["--docker-like"], "docker-non-root": ["--docker-like"]}[
        request.param
    ]
    user = None if request.param == "docker-root" else NOBODY
    for server in _server(request.param, options, user):
        yield request.param, server


def test_layers_reported(environment: tuple[str, Server]) -> None:
    name, server = environment
    health = server.health()
    assert health.status_code == 200, health.text
    report = health.json()
    assert report["ok"] and not report["missing"]
    root = name == "docker-root"
    assert ("separate_uid" in report["required"]) is root
    assert "landlock" in report["required"]  # in every mode, root included
    assert (
        report["layers"]["landlock"] and report["layers"]["seccomp"] and report["layers"]["no_capabilities"]
    )
    if not root:
        assert report["layers"]["uid"] == NOBODY  # the same uid as the server: Landlock does the hiding


@pytest.mark.parametrize("attack", sorted(CROSS_SECTION))
def test_cross_section_holds(environment: tuple[str, Server], attack: str) -> None:
    _name, server = environment
    code, expected = CROSS_SECTION[attack]
    result = server.run(code.replace("SERVER_PID", str(server.pid)))
    out = (result["error"] or {}).get("message", "") + (
        result["steps"][-1]["stdout"] if result["steps"] else ""
    )
    assert expected in out, result
    assert SECRET not in text(result)
    assert not os.path.exists("/tmp/explorer-env-probe")
    assert server.process.poll() is None
    assert_no_strays(server)
    assert_benign(server)


@pytest.fixture(scope="module")
def no_landlock_server() -> Iterator[Server]:
    yield from _server("no-landlock", ["--no-landlock"], NOBODY)


def test_refuses_without_a_required_layer(no_landlock_server: Server) -> None:
    """Non-root without Landlock: the server's files would be readable, so it runs nothing."""
    health = no_landlock_server.health()
    assert health.status_code == 503
    assert health.json()["missing"] == ["landlock"]
    response = no_landlock_server.client.post("/api/run", json={"code": "x = 1"})
    assert response.status_code == 503
    assert "landlock" in response.json()["error"]["message"]
    assert "Retry-After" in response.headers


@pytest.fixture(scope="module")
def unsafe_dev_server() -> Iterator[Server]:
    yield from _server("unsafe-dev", ["--no-landlock"], NOBODY, {"EXPLORER_UNSAFE_DEV": "1"})


def test_dev_override_serves_and_says_so(unsafe_dev_server: Server) -> None:
    health = unsafe_dev_server.health()
    assert health.status_code == 200
    assert health.json()["unsafe_dev"] is True and health.json()["missing"] == ["landlock"]
    assert_benign(unsafe_dev_server)
