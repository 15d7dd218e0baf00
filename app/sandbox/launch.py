"""The server's handle on one fork server: how it is started, what it holds, how it is shut.

A fork server (``app.sandbox.forkserver``) is started with an environment of its own (nothing of the
server's) and talks over one SOCK_SEQPACKET socket: JSON messages, and a new child's two pipes passed
as descriptors. The pool (``app.sandbox.pool``) decides when to start, use and replace one.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from app.config import Settings
from app.sandbox.layers import ChildConfig

APP_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds the ``app`` package
BOOT = "import sys; sys.path.insert(0, {root!r}); from app.sandbox.forkserver import main; main({fd})"
MAX_MESSAGE = 1 << 16
START_TIMEOUT = 120.0  # importing torch on a cold, busy machine

# The whole environment of the fork server, hence of every child: nothing from the server's.
HARDWARE_HINTS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def fork_server_env() -> dict[str, str]:
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": "/nonexistent",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
        "CUDA_VISIBLE_DEVICES": "",
        "TORCH_DEVICE_BACKEND_AUTOLOAD": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        # One string hash for every fork server, so a snippet that prints a set of strings prints it
        # in one order on every replica and after every restart (runs are reproducible, and cached:
        # app/web/runcache.py). Randomised hashing guards a server's dicts against chosen keys; here
        # the keys' author is the snippet, which can only slow its own run, under its own limits.
        "PYTHONHASHSEED": "0",
    }
    env.update({k: os.environ[k] for k in HARDWARE_HINTS if k in os.environ})
    return env


@dataclass
class ExitRecord:
    event: threading.Event = field(default_factory=threading.Event)
    status: int | None = None
    cpu: float = 0.0


@dataclass
class Child:
    pid: int
    uid: int | None
    job_fd: int
    result_fd: int
    record: ExitRecord
    owner: ForkServer | None = None  # the fork server that forked it: the only one that may kill it
    replace_after: bool = False  # its replacement is asked for once its run has ended (``pool._take``)

    def close(self) -> None:
        for fd in (self.job_fd, self.result_fd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def kill(self) -> None:
        """Ask its fork server to kill it (killing an exiting child is harmless)."""
        server = self.owner
        if server is not None and server.alive:
            with contextlib.suppress(OSError):
                server.send({"op": "kill", "pid": self.pid})


class ForkServerLost(Exception):
    pass


class NoChild(Exception):
    """The fork server is alive but produced no child in time."""


@dataclass
class ForkServer:
    """One running fork server and everything that dies with it."""

    process: subprocess.Popen
    sock: socket.socket
    pid: int
    landlock_abi: int
    workdir: str
    huge_page_mib: int = 0
    ready: collections.deque[Child] = field(default_factory=collections.deque)
    records: dict[int, ExitRecord] = field(default_factory=dict)
    spawns: collections.deque[float] = field(default_factory=collections.deque)  # asked-for times
    failed_at: float = 0.0  # when a spawn last failed
    starved: bool = False  # a spawn stalled and no child has arrived since
    alive: bool = True
    retired: bool = False  # closed on purpose: do not restart
    send_lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, message: dict) -> None:
        with self.send_lock:
            self.sock.send(json.dumps(message).encode())

    def answered(self, failed: bool = False) -> None:
        """One spawn request was answered (a child, or a failure); caller holds the pool's lock."""
        if self.spawns:
            self.spawns.popleft()
        if failed:
            self.failed_at = time.monotonic()


def launch(settings: Settings, server_euid: int) -> ForkServer:
    """Start a fork server and wait for its hello (it has imported torch and warmed up); blocking."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        process = subprocess.Popen(
            # -I but for -E: -s (no user site), -P (no script folder on sys.path); the environment
            # is read, and it is all ours (fork_server_env: PYTHONHASHSEED)
            [sys.executable, "-s", "-P", "-B", "-c", BOOT.format(root=APP_ROOT, fd=theirs.fileno())],
            env=fork_server_env(),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
    finally:
        theirs.close()
    config = ChildConfig(
        memory_mib=settings.memory_mib,
        cpu_seconds=settings.cpu_seconds,
        wall_seconds=settings.wall_seconds,
        max_steps=settings.max_steps,
        max_stdout=settings.max_stdout_bytes,
        max_result_bytes=settings.max_result_bytes,
        max_job_bytes=settings.max_code_bytes * 8 + 4096,
        uid_base=settings.sandbox_uid_base if server_euid == 0 else None,
    )
    try:
        ours.send(json.dumps({"op": "config", **asdict(config), "app_root": APP_ROOT}).encode())
        ours.settimeout(START_TIMEOUT)
        hello = json.loads(ours.recv(MAX_MESSAGE) or b"null")
        ours.settimeout(None)
        if not isinstance(hello, dict) or hello.get("op") != "hello":
            raise RuntimeError("the fork server did not start")
    except BaseException:
        process.kill()
        process.wait()
        ours.close()
        raise
    return ForkServer(
        process=process,
        sock=ours,
        pid=int(hello["pid"]),
        landlock_abi=int(hello.get("landlock_abi", 0)),
        workdir=str(hello.get("workdir", "")),
        huge_page_mib=int(hello.get("huge_page_mib", 0)),
    )


def shut(server: ForkServer) -> None:
    """Close our end (the fork server then kills its children and exits) and wait for it."""
    server.alive = False
    with contextlib.suppress(OSError):
        server.sock.shutdown(socket.SHUT_RDWR)
    server.sock.close()
    try:
        server.process.wait(timeout=3)  # it kills its children when our end closes
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    if os.path.basename(server.workdir).startswith("explorer-run-"):
        shutil.rmtree(server.workdir, ignore_errors=True)  # left behind when it was killed
