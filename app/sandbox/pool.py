"""The server's side of the sandbox: a fork server, children forked ahead of requests, one run each.

Why threads and not asyncio objects: the pool must work from any event loop (uvicorn's, or the
throw-away loops of a test client), so its I/O is blocking code in worker threads and one reader
thread per fork server; ``run`` hops into a thread with ``asyncio.to_thread``.

A second fork server is kept warm beside the one in use (``Settings.standby``), with its own children
forked ahead: when the fork server in use dies, the standby takes over at once (a fork server takes
seconds to start: it imports torch) and a new standby warms in the background.

Life of a run: take a ready child (a ``spawn`` is sent at once to replace it), read its hello (the
layers it is under: checked against what this server requires), write the job, read until EOF
against the wall deadline and the size cap, learn the exit status from the fork server (the only
process that may reap or kill the child, so pids are never confused), classify.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app.config import Settings
from app.run_errors import Param, english
from app.sandbox import frames
from app.sandbox.layers import ChildConfig
from app.sandbox.outcome import Limits, classify
from app.sandbox.runner import AnswerReader, as_asked, bounds_for, failed, parse_result
from app.sandbox.stop import RunStop
from app.schema import DeltaStep, DeltaTrace
from app.trace.consistency import Bounds

log = logging.getLogger(__name__)

APP_ROOT = str(Path(__file__).resolve().parents[2])  # the directory that holds the ``app`` package
BOOT = "import sys; sys.path.insert(0, {root!r}); from app.sandbox.forkserver import main; main({fd})"
MAX_MESSAGE = 1 << 16
HELLO_BYTES = 1 << 14
START_TIMEOUT = 120.0  # importing torch on a cold, busy machine
HELLO_TIMEOUT = 15.0  # a child still warming up
# A spawn asked for and not answered this long is taken as lost (e.g. its `ready` arrived while this
# process had no descriptors left, so the kernel dropped the child's pipes): it is asked for again.
SPAWN_TIMEOUT = 5.0
SPAWN_RETRY = 0.5  # after a failed spawn: no fork storm while descriptors are short
EXIT_TIMEOUT = 5.0
EXIT_GRACE = 0.5  # a child that sent an unusable answer: time to exit by itself before we kill it
WALL_GRACE = 1.0
RETRY_AFTER_FAILURE = 10.0  # after the child's own alarm: time to serialize and send the partial trace
STANDBY_RETRY = 5.0  # a standby that failed or died is started again no sooner than this

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
    owner: Any = None  # the _ForkServer that forked it: the only one that may kill it
    replace_after: bool = False  # its replacement is asked for once its run has ended (``_take``)

    def close(self) -> None:
        for fd in (self.job_fd, self.result_fd):
            with contextlib.suppress(OSError):
                os.close(fd)


class ForkServerLost(Exception):
    pass


class NoChild(Exception):
    """The fork server is alive but produced no child in time."""


@dataclass
class _ForkServer:
    """One running fork server and everything that dies with it."""

    process: subprocess.Popen
    sock: socket.socket
    pid: int
    landlock_abi: int
    workdir: str
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


# Variables torch writes into its own process environment when a module is imported (the fork server
# preloads torch._dynamo, which sets the inductor cache dir). A server process that ran torch itself
# (tests do) has the same name, which is no leak.
SET_BY_TORCH = frozenset({"TORCHINDUCTOR_CACHE_DIR"})


def required_layers(server_is_root: bool) -> list[str]:
    base = [
        "fork_server",
        "clean_env",
        "seccomp",
        "no_new_privs",
        "no_capabilities",
        "not_dumpable",
        "rlimits",
        "no_file_writes",
    ]
    # Landlock in every mode: as root, another uid hides files owned by the server's uid, but not the
    # world-readable ones (the repository, app/config.py, .git/config); only Landlock hides those.
    return [*base, "landlock", *(["separate_uid"] if server_is_root else [])]


def evaluate_layers(hello: dict, probe: dict, server_euid: int, server_only_env: set[str]) -> dict[str, Any]:
    """Which layers a probe child showed to be in force (``server_only_env``: the server's variables
    that the fork server was not given; none may reach a child)."""
    limits = probe.get("rlimits", {})

    def limited(name: str) -> bool:
        soft, hard = limits.get(name, (-1, -1))
        return soft != -1 and hard != -1

    return {
        "fork_server": True,
        "clean_env": "env" in probe and not set(probe["env"]) & server_only_env,
        "seccomp": probe.get("seccomp") == 2
        and probe.get("socket") == "EPERM"
        and probe.get("fork") == "EPERM",
        "no_new_privs": probe.get("no_new_privs") == 1,
        "no_capabilities": bool(probe.get("capabilities"))
        and all(int(c, 16) == 0 for c in probe["capabilities"]),
        "not_dumpable": probe.get("dumpable") == 0,
        "rlimits": all(limited(n) for n in ("AS", "DATA", "CPU", "FSIZE", "NOFILE", "CORE"))
        and list(limits.get("FSIZE", [1]))[0] == 0
        and list(limits.get("CORE", [1]))[0] == 0,
        "no_file_writes": probe.get("write_file") in ("EACCES", "EPERM", "EROFS"),
        "separate_uid": probe.get("uid") not in (None, 0, server_euid) and not probe.get("groups"),
        "landlock": hello.get("landlock_abi", 0) > 0 and probe.get("read_outside") == "EACCES",
    }


def isolation(probe: dict, layers: dict[str, Any]) -> dict[str, str]:
    """What the layers mean for a snippet, in plain words (``/healthz``), from what the probe child
    tried. No namespace is used: the child shares the server's network, PID and mount namespaces,
    and seccomp, Landlock and the limits are what stand between a snippet and them."""
    nproc = (probe.get("rlimits", {}).get("NPROC") or [-1])[0]
    bound = f"at most {nproc} processes and threads of its uid" if nproc not in (-1, None) else \
        "no bound of their own (the server's uid)"
    return {
        "network": f"no sockets: seccomp refuses socket() (the probe child got {probe.get('socket', '?')}); "
                   "no network namespace of its own: the child shares the server's",
        "processes": "refused: seccomp refuses fork and the clone of a process "
                     f"(probe: {probe.get('fork', '?')})",
        "threads": f"not refused by the OS layers (probe: {probe.get('thread', '?')}; torch starts its own), "
                   f"{bound}, within the run's CPU and memory limits; the policy gate refuses the ways a "
                   "snippet asks for them (threading, concurrent.futures, torch.set_num_threads)",
        "files": f"writing refused (probe: {probe.get('write_file', '?')}); reading "
                 + ("only what Landlock allows" if layers.get("landlock") else "NOT limited by Landlock")
                 + f" (probe outside it: {probe.get('read_outside', '?')})",
        "namespaces": "none used (network, PID, user, mount): the layers above are seccomp, Landlock, "
                      "resource limits, no capabilities, not dumpable"
                      + (", a uid of its own" if layers.get("separate_uid") else ""),
    }


class ForkServerPool:
    """The default runner: fork-server children under the OS layers (``app.sandbox.layers``)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.gate = settings.policy_gate or not settings.testing  # the off switch is honoured in tests only
        self.prefork = max(1, settings.prefork)
        self.limits = Limits(
            settings.wall_seconds, settings.cpu_seconds, settings.memory_mib, settings.max_result_bytes
        )
        self._cond = threading.Condition()
        self._server: _ForkServer | None = None
        self._launching = False
        self._standby: _ForkServer | None = None  # warm, probed, never given runs until it takes over
        self._standby_launching = False
        self._standby_failed_at = 0.0
        self._closed = False
        self._users = 0  # apps whose lifespan holds this pool
        self._last_launch = 0.0
        self.launches = 0
        self.layers: dict[str, Any] = {}
        self.isolation: dict[str, str] = {}
        self.landlock_abi = 0
        self.huge_page_mib = 0
        self.start_error: str | None = None
        self.server_euid = os.geteuid()
        self.required = required_layers(self.server_euid == 0)
        if self.server_euid != 0:
            _set_not_dumpable()  # a same-uid child must not read this process's memory or environment

    # -- public ------------------------------------------------------------------------------
    @property
    def missing(self) -> list[str]:
        if not self.layers:
            return list(self.required)
        return [name for name in self.required if not self.layers.get(name)]

    @property
    def serving(self) -> bool:
        return (
            self._server is not None and self._server.alive and (not self.missing or self.settings.unsafe_dev)
        )

    def start(self) -> None:
        """Start (or restart) the fork server and run the start-up probe; blocking."""
        if self.start_error and time.monotonic() - self._last_launch < RETRY_AFTER_FAILURE:
            return  # a broken machine must not make every request pay for a doomed start
        try:
            self._ensure_running()
        except Exception as error:  # noqa: BLE001 - reported by health, runs answer with it
            self.start_error = f"{type(error).__name__}: {error}"
            log.error("sandbox did not start: %s", self.start_error)

    async def astart(self) -> bool:
        """An app's lifespan begins: start now. Apps sharing the pool count; the last ``aclose`` stops it."""
        with self._cond:
            self._users += 1
        return await self.ready()

    async def ready(self) -> bool:
        """Start lazily (a test client may skip the lifespan); True when runs may be served."""
        if self._server is None or not self._server.alive:
            await asyncio.to_thread(self.start)
        return self.serving

    streams = True  # ``run`` takes ``on_steps`` (app.sandbox.runner.Runner)
    # Its answers depend on the code and the settings alone (seeded runs in identical children), so
    # they may be cached (app.web.runcache says which ones)
    deterministic = True

    async def run(self, code: str, on_steps: Callable[[list[DeltaStep]], None] | None = None, *,
                  cuda_on_cpu: bool = False, stop: RunStop | None = None) -> DeltaTrace:
        """``on_steps``: each frame's steps, validated and checked (``AnswerReader``), from a thread.
        ``cuda_on_cpu``: the code's cuda mapped to the CPU (``app.engine.cuda_on_cpu``). ``stop``: the
        reader may end the run early (the steps read so far are its answer)."""
        return await asyncio.to_thread(self.run_blocking, code, on_steps, cuda_on_cpu=cuda_on_cpu, stop=stop)

    def run_blocking(self, code: str, on_steps: Callable[[list[DeltaStep]], None] | None = None, *,
                     cuda_on_cpu: bool = False, stop: RunStop | None = None) -> DeltaTrace:
        if not (self._server and self._server.alive):
            self.start()
        if not self.serving:
            return failed("internal", *self.unavailable(), "SandboxUnavailable")
        for _attempt in range(3):
            try:
                child = self._take()
            except ForkServerLost:
                self.start()
                continue
            except NoChild:
                break
            job = {"kind": "run", "code": code, "gate": self.gate, "cuda_on_cpu": cuda_on_cpu}
            result = self._execute(child, job, bounds_for(code, self.settings), on_steps, stop)
            if result is not None:
                return as_asked(result, cuda_on_cpu)
        return failed("internal", "internal.no_process")

    def unavailable(self) -> tuple[str, dict[str, Param]]:
        """Why no snippet runs here: a message code and its params (``app.run_errors``)."""
        if self.start_error:
            return "internal.not_running", {"detail": str(self.start_error)}
        return "internal.unprotected", {"missing": ", ".join(self.missing)}

    def unavailable_message(self) -> str:
        return english(*self.unavailable())

    def producing(self) -> bool:
        """False when children were asked for and none came in time (a stalled spawn is asked for
        again here, so the pool heals itself even while no run arrives)."""
        server = self._server
        if server is None or not server.alive:
            return False
        with self._cond:
            stalled = not server.ready and self._stalled(server)
            server.starved |= stalled
        if stalled:
            self._request_spawn(server, renew=True)
        return not server.starved

    def health(self) -> dict[str, Any]:
        server = self._server
        producing = self.producing()
        state = "running" if producing else "no children"
        return {
            "ok": self.serving and producing,
            "runner": "forkserver",
            "state": state if server and server.alive else ("failed" if self.start_error else "stopped"),
            "layers": self.layers,
            "isolation": self.isolation,  # what they mean, said plainly
            "landlock_abi": self.landlock_abi,
            "required": self.required,
            "missing": self.missing,
            "unsafe_dev": self.settings.unsafe_dev,
            "policy_gate": self.gate,
            "error": self.start_error,
            "pool": {
                "prefork": self.prefork,
                "ready": len(server.ready) if server else 0,
                # children of the fork server in use that hold a job now (taken, not yet ended)
                "running": len(server.records) - len(server.ready) if server else 0,
                "spawns_pending": len(server.spawns) if server else 0,
                "fork_server_starts": self.launches,
                "standby": bool(self._standby and self._standby.alive),
                "huge_page_mib": self.huge_page_mib,
            },
        }

    def close(self) -> None:
        with self._cond:
            server, self._server = self._server, None
            standby, self._standby = self._standby, None
            self._closed = True  # a standby still warming is shut when it is ready
            for one in (server, standby):
                if one is not None:
                    one.retired = True  # a later run may start a new one (shared pools, test clients)
        for one in (server, standby):
            if one is not None:
                self._shut(one)

    async def aclose(self) -> None:
        """An app's lifespan ends: stop the fork server and its children, unless another app uses them."""
        with self._cond:
            self._users = max(0, self._users - 1)
            if self._users:
                return
        await asyncio.to_thread(self.close)

    # -- fork server lifecycle -----------------------------------------------------------------
    def _ensure_running(self) -> None:
        with self._cond:
            self._closed = False
            # A standby already warming is nearer to serving than a launch from nothing would be.
            while self._launching or self._standby_launching:
                self._cond.wait()
            if self._server is not None and self._server.alive:
                return
            if self._promote():
                self._cond.notify_all()
                return
            self._launching = True
        try:
            wait = 1.0 - (time.monotonic() - self._last_launch)
            if wait > 0:
                time.sleep(wait)  # a crash loop must not become a fork-server storm
            self._last_launch = time.monotonic()
            server = self._launch()
            with self._cond:
                self._server = server
            self._probe(server)
            self.start_error = None
        finally:
            with self._cond:
                self._launching = False
                self._cond.notify_all()
        self._want_standby()

    # -- the warm standby ----------------------------------------------------------------------
    def _promote(self) -> bool:
        """The standby becomes the fork server in use (caller holds the lock); False: there is none."""
        standby = self._standby
        if standby is None or not standby.alive:
            return False
        self._server, self._standby = standby, None
        log.warning("fork server replaced by its warm standby")
        threading.Thread(target=self._want_standby, name="sandbox-standby", daemon=True).start()
        return True

    def _want_standby(self) -> None:
        """Start warming a standby unless one is there, warming, or failed moments ago."""
        if not self.settings.standby or not self.serving:
            return
        with self._cond:
            if self._closed or self._standby is not None or self._standby_launching:
                return
            wait = self._standby_failed_at + STANDBY_RETRY - time.monotonic()
            self._standby_launching = True
        threading.Thread(target=self._warm_standby, args=(max(wait, 0.0),), name="sandbox-standby",
                         daemon=True).start()

    def _warm_standby(self, wait: float) -> None:
        server = None
        promoted = False
        try:
            time.sleep(wait)
            server = self._launch()
            self._probe(server)
            with self._cond:
                keep = not self._closed and self._standby is None and server.alive
                if keep:
                    self._standby = server
                    if not self._launching and (self._server is None or not self._server.alive):
                        promoted = self._promote()  # the one in use died while this one warmed
                    self._cond.notify_all()
            if not keep:
                server.retired = True
                self._shut(server)
        except Exception as error:  # noqa: BLE001 - the pool serves on without a standby
            log.warning("sandbox standby did not start: %s: %s", type(error).__name__, error)
            self._standby_failed_at = time.monotonic()
            if server is not None:
                server.retired = True
                self._shut(server)
        finally:
            with self._cond:
                self._standby_launching = False
                self._cond.notify_all()
        if promoted:
            self._want_standby()  # the one _promote asked for found this launch still running

    def _launch(self) -> _ForkServer:
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
            memory_mib=self.settings.memory_mib,
            cpu_seconds=self.settings.cpu_seconds,
            wall_seconds=self.settings.wall_seconds,
            max_steps=self.settings.max_steps,
            max_stdout=self.settings.max_stdout_bytes,
            max_result_bytes=self.settings.max_result_bytes,
            max_job_bytes=self.settings.max_code_bytes * 8 + 4096,
            uid_base=self.settings.sandbox_uid_base if self.server_euid == 0 else None,
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
        self.launches += 1
        self.landlock_abi = int(hello.get("landlock_abi", 0))
        self.huge_page_mib = int(hello.get("huge_page_mib", 0))
        server = _ForkServer(
            process=process,
            sock=ours,
            pid=int(hello["pid"]),
            landlock_abi=self.landlock_abi,
            workdir=str(hello.get("workdir", "")),
        )
        threading.Thread(target=self._read_loop, args=(server,), name="sandbox-reader", daemon=True).start()
        for _ in range(self.prefork):
            self._request_spawn(server)
        return server

    def _probe(self, server: _ForkServer) -> None:
        child = self._take(server)
        try:
            hello = self._read_hello(child)
            if hello is None:
                raise RuntimeError("the probe child did not start")
            frames.write_before(
                child.job_fd, frames.encode_frame(b'{"kind":"probe"}'), time.monotonic() + HELLO_TIMEOUT
            )
            data, _ = frames.read_to_eof(child.result_fd, HELLO_BYTES * 4, time.monotonic() + HELLO_TIMEOUT)
            probe = json.loads(frames.decode_frame(data, HELLO_BYTES * 4))
        finally:
            child.close()
            self._forget(server, child)
        server_only = set(os.environ) - set(fork_server_env()) - SET_BY_TORCH
        self.layers = evaluate_layers(hello, probe, self.server_euid, server_only)
        self.layers["uid"] = probe.get("uid")
        self.isolation = isolation(probe, self.layers)
        missing = self.missing
        if missing:
            log.warning(
                "sandbox layers missing: %s%s",
                ", ".join(missing),
                " (EXPLORER_UNSAFE_DEV=1: serving anyway)" if self.settings.unsafe_dev else "",
            )

    def _read_loop(self, server: _ForkServer) -> None:
        try:
            while True:
                message, fds, _flags, _addr = socket.recv_fds(server.sock, MAX_MESSAGE, 4)
                if not message:
                    break
                self._on_message(server, json.loads(message), fds)
        except (OSError, ValueError) as error:
            log.debug("fork server channel closed: %s", error)
        self._on_lost(server)

    def _on_message(self, server: _ForkServer, message: dict, fds: list[int]) -> None:
        op = message.get("op")
        if op == "ready" and len(fds) == 2:
            for fd in fds:
                os.set_blocking(fd, False)
            record = ExitRecord()
            child = Child(int(message["pid"]), message.get("uid"), fds[0], fds[1], record, server)
            with self._cond:
                server.records[child.pid] = record
                _answered(server)
                server.ready.append(child)
                server.starved = False
                self._cond.notify_all()
        elif op == "ready":
            # The kernel could not hand us the child's pipes (this process ran out of descriptors):
            # a failed spawn. The child is useless without them; the next take asks for another.
            for fd in fds:
                os.close(fd)
            log.warning("a sandbox child arrived without its pipes (out of file descriptors?)")
            with contextlib.suppress(OSError, KeyError, ValueError):
                server.send({"op": "kill", "pid": int(message["pid"])})
            with self._cond:
                _answered(server, failed=True)
                self._cond.notify_all()
        elif op == "exit":
            with self._cond:
                record = server.records.get(int(message["pid"]))
            if record is not None:
                record.status = int(message["status"])
                record.cpu = float(message.get("cpu", 0.0))
                record.event.set()
        elif op == "error":
            log.warning("fork server: %s", message.get("message"))
            with self._cond:
                _answered(server, failed=True)
                self._cond.notify_all()
        else:
            for fd in fds:
                os.close(fd)

    def _on_lost(self, server: _ForkServer) -> None:
        with self._cond:
            server.alive = False
            ready, server.ready = list(server.ready), collections.deque()
            records, server.records = list(server.records.values()), {}
            in_use = self._server is server
            if in_use:
                self._server = None
            elif self._standby is server:
                self._standby = None
                self._standby_failed_at = time.monotonic()
            retired = server.retired
            replaced = in_use and not retired and self._promote()  # before anything slow below
            self._cond.notify_all()
        for child in ready:
            child.close()
        for record in records:
            record.event.set()  # status None: "the sandbox restarted"
        self._shut(server)
        if retired or replaced:
            return
        if in_use:
            log.warning("fork server exited; starting a new one")
            self.start()
        else:
            self._want_standby()

    def _shut(self, server: _ForkServer) -> None:
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

    # -- one run -------------------------------------------------------------------------------
    def _request_spawn(self, server: _ForkServer, renew: bool = False, warm: bool = True) -> None:
        """Ask for one child; ``renew``: the spawns asked for so far are taken as lost first; ``warm``:
        the child warms up before its job (``app.sandbox.child.serve_one``)."""
        with self._cond:
            if renew:
                server.spawns.clear()
            server.spawns.append(time.monotonic())
        with contextlib.suppress(OSError):  # a lost fork server: the reader thread sees it
            server.send({"op": "spawn"} if warm else {"op": "spawn", "warm": False})

    @staticmethod
    def _stalled(server: _ForkServer) -> bool:
        return bool(server.spawns) and time.monotonic() - server.spawns[0] > SPAWN_TIMEOUT

    def _take(self, only: _ForkServer | None = None) -> Child:
        """A ready child of the fork server in use (or of ``only``: a standby being probed)."""
        deadline = time.monotonic() + HELLO_TIMEOUT
        with self._cond:
            while True:
                server = only or self._server
                if server is None or not server.alive:
                    raise ForkServerLost
                if server.ready:
                    child = server.ready.popleft()
                    # Another run in flight beside this one: the server is busy, and the child asked
                    # for now will likely be taken as soon as it is ready. Its warm-up would cost more
                    # CPU than it saves its run (6.3 against 3.8 ms for the 6-line snippet), CPU the
                    # runs in flight need; an idle server's child warms up, off any request's path.
                    busy = len(server.records) - len(server.ready) > 1
                    # Idle, the child forked now would be set up (~11 ms of CPU) beside this run on
                    # a 2-core machine, for a request that still has another ready child: asked for
                    # once this run has ended (``_replace``), it is set up beside the server's work
                    # on the answer and the time between requests instead.
                    child.replace_after = not busy and only is None
                    break
                stalled = self._stalled(server)
                server.starved |= stalled
                retry_in = server.failed_at + SPAWN_RETRY - time.monotonic()
                if not server.spawns and retry_in > 0:
                    self._cond.wait(retry_in)
                    continue
                if not server.spawns or stalled:
                    self._cond.release()
                    try:
                        self._request_spawn(server, renew=stalled)
                    finally:
                        self._cond.acquire()
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    raise NoChild
                self._cond.wait(min(left, SPAWN_TIMEOUT))
                if time.monotonic() >= deadline and not server.ready:
                    raise NoChild
        if not child.replace_after:
            self._request_spawn(server, warm=not busy)  # keep `prefork` children ahead of demand
        return child

    def _replace(self, child: Child) -> None:
        """Ask for the replacement of ``child``, whose run has ended, if ``_take`` left it for then."""
        server = child.owner
        if child.replace_after and server is not None and server.alive:
            child.replace_after = False
            self._request_spawn(server)

    def _forget(self, server: _ForkServer, child: Child) -> None:
        with self._cond:
            server.records.pop(child.pid, None)

    def _kill(self, child: Child) -> None:
        server = child.owner
        if server is not None and server.alive:
            with contextlib.suppress(OSError):
                server.send({"op": "kill", "pid": child.pid})

    def _read_hello(self, child: Child) -> dict | None:
        try:
            hello = json.loads(
                frames.read_frame_before(child.result_fd, HELLO_BYTES, time.monotonic() + HELLO_TIMEOUT)
            )
        except (frames.FrameError, frames.Deadline, ValueError, OSError):
            return None
        return hello if isinstance(hello, dict) else None

    def _hello_ok(self, hello: dict, child: Child) -> bool:
        if hello.get("seccomp") != 2 or hello.get("no_new_privs") != 1 or hello.get("dumpable") != 0:
            return self.settings.unsafe_dev
        if "separate_uid" in self.required and hello.get("uid") != child.uid:
            return self.settings.unsafe_dev
        if "landlock" in self.required and not hello.get("landlock_abi"):
            return self.settings.unsafe_dev
        return True

    def _execute(self, child: Child, job: dict, bounds: Bounds,
                 on_steps: Callable[[list[DeltaStep]], None] | None = None,
                 stop: RunStop | None = None) -> DeltaTrace | None:
        """One run on ``child``; None when the child never got the job (the caller tries another)."""
        server = child.owner
        try:
            hello = self._read_hello(child)
            if hello is None or not self._hello_ok(hello, child):
                self._kill(child)
                if hello is not None:
                    return failed("internal", "internal.unprotected_child", error_type="SandboxUnavailable")
                return None
            payload = json.dumps(job, ensure_ascii=False).encode()
            try:
                frames.write_before(
                    child.job_fd, frames.encode_frame(payload), time.monotonic() + HELLO_TIMEOUT
                )
            except (OSError, frames.Deadline):
                self._kill(child)
                return None
            os.close(child.job_fd)
            child.job_fd = -1
            deadline = time.monotonic() + self.settings.wall_seconds + WALL_GRACE
            reader = AnswerReader(bounds, on_steps)  # reads the steps while the run goes on
            if stop is not None:  # the reader's Stop ends the child: its stream ends, read_answer returns
                stop.bind(lambda: self._kill(child))
            try:
                data, stopped, envelope = frames.read_answer(child.result_fd, self.settings.max_result_bytes,
                                                             deadline, reader.add)
            finally:
                if stop is not None:
                    stop.unbind()
            if stop is not None and stop.requested and envelope is None:
                self._kill(child)
                child.record.event.wait(EXIT_TIMEOUT)
                return reader.stopped()
            # Whatever happened, the child must not outlive the request (it may have closed its end
            # early and gone on running). Killing an exiting child is harmless.
            killed = True
            answer = None
            if not stopped:
                answer = reader.result(envelope) if envelope is not None else \
                    parse_result(data, self.settings.max_result_bytes, bounds)
                if answer.error is None or answer.error.kind != "internal":
                    self._kill(child)
                    return answer  # a well-formed answer: the exit status adds nothing
                # Unusable: learn how the child ended by itself before we end it, so that our own
                # SIGKILL is never mistaken for the kernel's OOM killer.
                killed = not child.record.event.wait(EXIT_GRACE)
            if killed:
                self._kill(child)
            if not child.record.event.wait(EXIT_TIMEOUT):
                self._kill(child)
                return failed("internal", "internal.unfinished")
            status = child.record.status
            return reader.kept(classify(data, stopped, status, child.record.cpu, self.limits,
                                        killed_by_server=killed, bounds=bounds, answer=answer))
        finally:
            child.close()
            if server is not None:
                self._forget(server, child)
            self._replace(child)


def _answered(server: _ForkServer, failed: bool = False) -> None:
    """One spawn request was answered (a child, or a failure); caller holds the pool's lock."""
    if server.spawns:
        server.spawns.popleft()
    if failed:
        server.failed_at = time.monotonic()


def _set_not_dumpable() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0


# -- one pool per configuration and process: many apps (tests!) must not mean many fork servers ----
_POOLS: dict[tuple, ForkServerPool] = {}
_POOLS_LOCK = threading.Lock()


# What a pool is made of; apps that differ only elsewhere (data folder, database...) share one.
POOL_SETTINGS = (
    "sandbox",
    "prefork",
    "standby",
    "sandbox_uid_base",
    "unsafe_dev",
    "policy_gate",
    "testing",
    "max_steps",
    "max_stdout_bytes",
    "max_code_bytes",
    "max_result_bytes",
    "wall_seconds",
    "cpu_seconds",
    "memory_mib",
)


def _key(settings: Settings) -> tuple:
    return tuple(str(getattr(settings, name)) for name in POOL_SETTINGS)


def shared_pool(settings: Settings) -> ForkServerPool:
    with _POOLS_LOCK:
        key = _key(settings)
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ForkServerPool(settings)
        return pool


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS.values()):
        pool.close()


def default_runner(settings: Settings):  # noqa: ANN201 - a Runner
    """What ``create_app`` runs snippets with unless given a runner."""
    if settings.sandbox == "subprocess":
        # Unconfined: the snippet runs with the server's powers. Fail closed unless the operator said
        # explicitly that this is a private development machine.
        if not settings.unsafe_dev:
            raise RuntimeError(
                "EXPLORER_SANDBOX=subprocess runs snippets without the sandbox; "
                "it needs EXPLORER_UNSAFE_DEV=1 as well (a private development machine only)"
            )
        from app.sandbox.runner import SubprocessRunner

        return SubprocessRunner(settings)
    return shared_pool(settings)
