"""The server's side of the sandbox: a fork server, children forked ahead of requests, one run each.

Why threads and not asyncio objects: the pool must work from any event loop (uvicorn's, or the
throw-away loops of a test client), so its I/O is blocking code in worker threads and one reader
thread per fork server; ``run`` hops into a thread with ``asyncio.to_thread``.

A second fork server is kept warm beside the one in use (``Settings.standby``), with its own children
forked ahead: when the fork server in use dies, the standby takes over at once (a fork server takes
seconds to start: it imports torch) and a new standby warms in the background.

Life of a run: take a ready child (its replacement is asked for at once, or once the run has ended
on an idle server), then ``one_run.execute``: read its hello (the layers it is under: checked against
what this server requires, ``proof``), write the job, read until EOF against the wall deadline and the
size cap, learn the exit status from the fork server, classify. Starting and shutting a fork server:
``launch``; what a probe child proves of the layers: ``proof``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from app.config import Settings
from app.run_errors import Param, english
from app.sandbox.launch import (
    MAX_MESSAGE,
    Child,
    ExitRecord,
    ForkServer,
    ForkServerLost,
    NoChild,
    launch,
    shut,
)
from app.sandbox.one_run import execute
from app.sandbox.outcome import Limits
from app.sandbox.proof import HELLO_TIMEOUT, probe, required_layers
from app.sandbox.runner import as_asked, bounds_for, failed
from app.sandbox.stop import RunStop
from app.schema import DeltaStep, DeltaTrace
from app.trace.consistency import Bounds

log = logging.getLogger(__name__)

# How long a spawn may wait for its child, and what follows a failure.
# A spawn asked for and not answered this long is taken as lost (e.g. its `ready` arrived while this
# process had no descriptors left, so the kernel dropped the child's pipes): it is asked for again.
SPAWN_TIMEOUT = 5.0
SPAWN_RETRY = 0.5  # after a failed spawn: no fork storm while descriptors are short
RETRY_AFTER_FAILURE = 10.0  # a start that failed is not tried again sooner than this
STANDBY_RETRY = 5.0  # a standby that failed or died is started again no sooner than this


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
        self._server: ForkServer | None = None
        self._launching = False
        self._standby: ForkServer | None = None  # warm, probed, never given runs until it takes over
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
                shut(one)

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
                shut(server)
        except Exception as error:  # noqa: BLE001 - the pool serves on without a standby
            log.warning("sandbox standby did not start: %s: %s", type(error).__name__, error)
            self._standby_failed_at = time.monotonic()
            if server is not None:
                server.retired = True
                shut(server)
        finally:
            with self._cond:
                self._standby_launching = False
                self._cond.notify_all()
        if promoted:
            self._want_standby()  # the one _promote asked for found this launch still running

    def _launch(self) -> ForkServer:
        server = launch(self.settings, self.server_euid)
        self.launches += 1
        self.landlock_abi = server.landlock_abi
        self.huge_page_mib = server.huge_page_mib
        threading.Thread(target=self._read_loop, args=(server,), name="sandbox-reader", daemon=True).start()
        for _ in range(self.prefork):
            self._request_spawn(server)
        return server

    def _probe(self, server: ForkServer) -> None:
        child = self._take(server)
        try:
            proved = probe(child, self.server_euid)
        finally:
            child.close()
            self._forget(server, child)
        self.layers, self.isolation = proved["layers"], proved["isolation"]
        missing = self.missing
        if missing:
            log.warning(
                "sandbox layers missing: %s%s",
                ", ".join(missing),
                " (EXPLORER_UNSAFE_DEV=1: serving anyway)" if self.settings.unsafe_dev else "",
            )

    def _read_loop(self, server: ForkServer) -> None:
        try:
            while True:
                message, fds, _flags, _addr = socket.recv_fds(server.sock, MAX_MESSAGE, 4)
                if not message:
                    break
                self._on_message(server, json.loads(message), fds)
        except (OSError, ValueError) as error:
            log.debug("fork server channel closed: %s", error)
        self._on_lost(server)

    def _on_message(self, server: ForkServer, message: dict, fds: list[int]) -> None:
        op = message.get("op")
        if op == "ready" and len(fds) == 2:
            for fd in fds:
                os.set_blocking(fd, False)
            record = ExitRecord()
            child = Child(int(message["pid"]), message.get("uid"), fds[0], fds[1], record, server)
            with self._cond:
                server.records[child.pid] = record
                server.answered()
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
                server.answered(failed=True)
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
                server.answered(failed=True)
                self._cond.notify_all()
        else:
            for fd in fds:
                os.close(fd)

    def _on_lost(self, server: ForkServer) -> None:
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
        shut(server)
        if retired or replaced:
            return
        if in_use:
            log.warning("fork server exited; starting a new one")
            self.start()
        else:
            self._want_standby()

    # -- one run -------------------------------------------------------------------------------
    def _request_spawn(self, server: ForkServer, renew: bool = False, warm: bool = True) -> None:
        """Ask for one child; ``renew``: the spawns asked for so far are taken as lost first; ``warm``:
        the child warms up before its job (``app.sandbox.child.serve_one``)."""
        with self._cond:
            if renew:
                server.spawns.clear()
            server.spawns.append(time.monotonic())
        with contextlib.suppress(OSError):  # a lost fork server: the reader thread sees it
            server.send({"op": "spawn"} if warm else {"op": "spawn", "warm": False})

    @staticmethod
    def _stalled(server: ForkServer) -> bool:
        return bool(server.spawns) and time.monotonic() - server.spawns[0] > SPAWN_TIMEOUT

    def _take(self, only: ForkServer | None = None) -> Child:
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

    def _forget(self, server: ForkServer, child: Child) -> None:
        with self._cond:
            server.records.pop(child.pid, None)

    def _execute(self, child: Child, job: dict, bounds: Bounds,
                 on_steps: Callable[[list[DeltaStep]], None] | None = None,
                 stop: RunStop | None = None) -> DeltaTrace | None:
        """One run on ``child`` (``one_run.execute``); None when the child never got the job."""
        try:
            return execute(child, job, bounds, self.settings, self.limits, self.required, on_steps, stop)
        finally:
            child.close()
            if child.owner is not None:
                self._forget(child.owner, child)
            self._replace(child)


def _set_not_dumpable() -> None:
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
