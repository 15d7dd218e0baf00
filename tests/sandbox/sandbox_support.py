"""Helpers for the sandbox tests: a real uvicorn server in a subprocess, and what to check after a run."""

from __future__ import annotations

import functools
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import torch

from app.schema import DeltaResponse
from app.serving import loopback_socket

ROOT = Path(__file__).resolve().parents[2]
SECRET = "explorer-test-secret-" + secrets.token_hex(8)
UID_RANGE = range(61000, 61000 + 64 * 64)

# Limits shrunk for a 2-core CI machine.
TEST_ENV = {
    "EXPLORER_TESTING": "1",
    "EXPLORER_WALL_SECONDS": "2",
    "EXPLORER_CPU_SECONDS": "2",
    "EXPLORER_RATE_PER_MINUTE": "100000",
    "EXPLORER_RATE_BURST": "100000",
    "EXPLORER_TEST_SECRET": SECRET,
    # No run cache: these tests prove that runs happen (a benign run after a crash, children used up),
    # so every request must reach the sandbox (tests/cluster tests the cache)
    "EXPLORER_CACHE_MIB": "0",
}


# ``uvicorn app.web.main:create_app --factory --log-level warning`` on the inherited socket argv[1]
# (uvicorn's own ``--fd`` would keep a second descriptor for it: the starved servers count them)
BARE_UVICORN = ("import sys; from app.serving import serve_inherited; sys.exit(serve_inherited("
                "'app.web.main:create_app', int(sys.argv[1]), factory=True, log_level='warning'))")


@dataclass
class Server:
    process: subprocess.Popen
    port: int
    log: Path
    gate: bool
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=60)

    @property
    def pid(self) -> int:
        return self.process.pid

    def run(self, code: str) -> dict:
        """The run in the delta format (any size fits it), each step's ``stdout`` made cumulative as
        in v1 (what the checks read: everything printed by then)."""
        response = self.client.post("/api/run", json={"code": code, "format": "delta"})
        assert response.status_code == 200, (response.status_code, response.text[:2000])
        data = response.json()
        DeltaResponse.model_validate(data)  # whatever the child did, the answer keeps the contract
        printed = ""
        for step in data["steps"]:
            printed += step["stdout"]
            step["stdout"] = printed
        return data

    def health(self) -> httpx.Response:
        return self.client.get("/healthz")

    def stop(self) -> None:
        self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def start_server(
    workdir: Path,
    env: dict[str, str],
    gate: bool = True,
    prefix: list[str] | None = None,
    user: int | None = None,
    serve: bool = False,
) -> Server:
    """``serve``: start it as a user does (``python -m app serve``: the connection limits of
    ``app.serving``), not as a bare ``uvicorn`` app. Either listens on a socket this process bound
    first and hands it over (``app.serving.loopback_socket``)."""
    listener = loopback_socket()
    port, fd = listener.getsockname()[1], str(listener.fileno())
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "server.log"
    full_env = {**os.environ, **TEST_ENV, "EXPLORER_DATA_DIR": str(workdir / "data"), **env}
    if not gate:
        full_env["EXPLORER_POLICY_GATE"] = "0"
    if serve:
        command = [*(prefix or []), sys.executable, "-m", "app", "serve", "--fd", fd]
    else:
        command = [*(prefix or []), sys.executable, "-c", BARE_UVICORN, fd]
    if user is not None:
        os.chown(workdir, user, user)
    with log.open("wb") as stream, listener:
        process = subprocess.Popen(command, cwd=ROOT, env=full_env, stdout=stream, stderr=subprocess.STDOUT,
                                   pass_fds=(listener.fileno(),))
    server = Server(process, port, log, gate)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"server exited ({process.returncode}):\n{server.log_tail()}")
        try:
            if server.health().status_code in (200, 503):
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"server did not start:\n{server.log_tail()}")


# -- the benign run that must work after every attack (torch in this process is the oracle) ---------


def start_starved_server(workdir: Path, open_files: int) -> Server:
    """A bare uvicorn server (no connection limits of ``app.serving``) that may hold only
    ``open_files`` descriptors, so that idle connections really exhaust it."""
    return start_server(workdir, {}, prefix=["prlimit", f"--nofile={open_files}:{open_files}", "--"])
BENIGN = """\
x = torch.arange(4.0, requires_grad=True)
y = (x * x).sum()
y.backward()
r = torch.rand(2)
print(y.item(), x.grad.tolist(), x.dtype, torch.is_grad_enabled(), math.pi, r.tolist())
"""


@functools.cache
def benign_expected() -> str:
    # Computed once: tests call this from several threads, and the global RNG is not theirs to share.
    torch.manual_seed(0)  # the engine seeds every run with 0 (reproducible permalinks)
    x = torch.arange(4.0, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    r = torch.rand(2)
    import math

    return f"{y.item()} {x.grad.tolist()} {x.dtype} {torch.is_grad_enabled()} {math.pi} {r.tolist()}\n"


def assert_benign(server: Server) -> None:
    expected = benign_expected()
    result = server.run(BENIGN)
    assert result["ok"], result["error"]
    assert result["steps"][-1]["stdout"] == expected
    phases = [step.get("phase", "forward") for step in result["steps"]]
    assert phases.count("forward") == 5 and phases.count("backward") == 3  # y.backward() ran 3 nodes


# -- processes ---------------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, str]:
    fields = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    except OSError:
        pass
    return fields


def processes() -> Iterator[tuple[int, int, int]]:
    """(pid, ppid, real uid) of every live process."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            status = _status(int(entry))
            if status and status.get("State", "").split()[0] != "Z":
                yield int(entry), int(status["PPid"]), int(status["Uid"].split()[0])


def _is_fork_server(pid: int) -> bool:
    try:
        return b"app.sandbox.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _started(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 1 << 62


def fork_servers(server: Server) -> list[int]:
    """The server's fork servers, oldest first: the one in use, then its warm standby (if any)."""
    return sorted((pid for pid, ppid, _uid in processes() if ppid == server.pid and _is_fork_server(pid)),
                  key=_started)


def fork_server_pid(server: Server, timeout: float = 60) -> int:
    """The fork server in use: the oldest (a standby is started after it, and takes over when it dies)."""
    deadline = time.monotonic() + timeout
    while True:
        found = fork_servers(server)
        if found:
            return found[0]
        if time.monotonic() > deadline:
            raise AssertionError("no fork server found")
        time.sleep(0.1)


def assert_no_strays(server: Server, prefork: int = 2) -> None:
    """Only the fork servers' pre-forked children may be left: nothing outlives its request. (A
    ceiling for a loaded machine, where a killed child's exit and the pre-fork that replaces it can
    take seconds; the wait ends as soon as the table is clean.)"""
    deadline = time.monotonic() + 30
    while True:
        forkers = fork_servers(server)
        table = list(processes())
        children = [pid for pid, ppid, _ in table if ppid in forkers]
        grandchildren = [pid for pid, ppid, _ in table if ppid in children]
        # A child that escaped its parent would be reparented to init, or be a sandbox uid's child.
        sandboxed = {pid for pid, _, uid in table if uid in UID_RANGE}
        sandbox_uids = [
            pid for pid, ppid, uid in table if uid in UID_RANGE and (ppid == 1 or ppid in sandboxed)
        ]
        if forkers and len(children) <= prefork * len(forkers) and not grandchildren and not sandbox_uids:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"stray processes: children={children} grandchildren={grandchildren} orphans={sandbox_uids}"
            )
        time.sleep(0.05)


def text(result: dict) -> str:
    return json.dumps(result)
