"""One forked child: sandbox itself, warm up, say hello, run exactly one job, answer, exit.

Everything before the job is read is trusted code. The job (the snippet) can do anything the OS layers
allow, including forging its own answer; the server copes (strict framing, schema, exit status).

Pipes: the child reads one frame (the job) from ``job_fd`` and writes on ``result_fd`` first the hello
(the layers in force, written before any user input exists), then the answer (``ResultStream``): its
steps in frames as the run makes them, then the envelope.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import os
import resource
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson

from app import policy, policy_builtins
from app.engine import EngineLimits, trace_delta
from app.engine.run import LIVE
from app.engine.tracer import SNIPPET_FILENAME
from app.run_errors import error_dict
from app.sandbox import layers
from app.sandbox.frames import FRAME_MAX, SPLIT_FIELDS, encode_frame, read_frame, write_all
from app.sandbox.seccomp import Filters

EXIT_SETUP_FAILED = 71
EXIT_JOB_FAILED = 73
ALARM_REPEAT = 0.05  # seconds between repeated alarms once the wall limit has passed

WARM_UP = """\
a = torch.ones(2, 3, requires_grad=True)
b = a * 2 + torch.randn(2, 3)
c = b.clone()
d = b.detach()
d += 1
e = c.view(3, 2)[0]
loss = (c * b).sum() + e.sigmoid().mean()
loss.backward()
"""


class WallTimeReached(BaseException):  # noqa: N818 - named for what the learner sees
    """Raised into the snippet when the wall-clock budget is spent."""


class CpuTimeReached(BaseException):  # noqa: N818
    """Raised into the snippet when the CPU budget is spent (SIGXCPU)."""


def _inside_snippet(frame: Any) -> bool:
    """Raise only while snippet code is on the stack: never into the engine's own bookkeeping."""
    while frame is not None:
        if frame.f_code.co_filename == SNIPPET_FILENAME:
            return True
        frame = frame.f_back
    return False


def _raiser(exception: type[BaseException]):  # noqa: ANN202
    def handler(_signum: int, frame: Any) -> None:
        if exception is WallTimeReached:
            _FORCE["alarms"] = _FORCE.get("alarms", 0) + 1
            if _FORCE["alarms"] > FORCE_AFTER_ALARMS and "fd" in _FORCE:
                _answer_now("wall")  # the snippet catches every stop: answer with the steps so far
        elif "fd" in _FORCE:
            # SIGXCPU comes once, one CPU second before the kernel's SIGKILL: if the snippet has not
            # finished GRACE_CPU_SECONDS of CPU later, it swallowed the stop, so answer before the kill
            signal.signal(signal.SIGPROF, lambda *_: _answer_now("cpu"))
            signal.setitimer(signal.ITIMER_PROF, GRACE_CPU_SECONDS)
        if _inside_snippet(frame):
            raise exception

    return handler


# After the wall limit the alarm repeats every ALARM_REPEAT seconds, raising WallTimeReached into the
# snippet; a snippet that catches everything (`except BaseException: pass` in a loop) never stops.
# After this many repeats (or GRACE_CPU_SECONDS after the CPU limit) the child answers itself with the
# steps recorded so far, and exits — before the server's or the kernel's SIGKILL, which would lose them.
FORCE_AFTER_ALARMS = 8
GRACE_CPU_SECONDS = 0.3
_FORCE: dict[str, Any] = {}


def _answer_now(limit: str) -> None:
    _silence_stops()  # called from a signal handler with the snippet on the stack: no stop may land here
    config: layers.ChildConfig = _FORCE["config"]
    steps = list(LIVE.get("steps", ()))
    if limit == "wall":
        error = error_dict("timeout", "Timeout", "timeout.wall_forced",
                           {"seconds": config.wall_seconds, "steps": len(steps)})
    else:
        error = error_dict("timeout", "CpuTimeout", "timeout.cpu_forced",
                           {"seconds": config.cpu_seconds, "steps": len(steps)})
    result = {"format": "delta", "ok": False, "truncated": True, "error": error, "steps": steps}
    try:
        _FORCE["stream"].finish(result)
    finally:
        os._exit(0)


# In the child, a short one: the fork server already ran WARM_UP (lazy initialisation is shared), so
# this only copies-on-write the pages every run touches (the engine, the tracer, common ops). Measured
# for the 6-line clone/detach snippet: request path -2 ms for +2 ms of CPU before the request.
CHILD_WARM_UP = """\
a = torch.ones(3, requires_grad=True)
b = a.clone()
c = a.detach()
c.add_(1)
"""


def _silence_stops() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.setitimer(signal.ITIMER_PROF, 0)
    for number in (signal.SIGALRM, signal.SIGXCPU, signal.SIGPROF):
        signal.signal(number, signal.SIG_IGN)


def warm_up(source: str = WARM_UP, max_steps: int = 50) -> None:
    """Fault in the code and data pages a run touches, so the request path pays none of it. (The delta
    trace, as a run makes it: a child never validates or expands one.)"""
    policy.check(source)
    trace_delta(source, EngineLimits(max_steps=max_steps, max_stdout=4096))


def _error(kind: str, error_type: str, message: str, line: int | None = None) -> dict:
    """An error in torch's (or Python's) own words: no code, it is not translated."""
    return {"kind": kind, "type": error_type, "message": message[:4000], "line": line}


# Where the sandbox differs from a plain run, the error says so (issue #11, 3).
SHARED_MEMORY_MARKERS = ("shared memory", "shm_open", "/dev/shm", "share_memory", "torch_shm_manager")
THREAD_MARKERS = ("can't start new thread", "can't start a new thread", "resource temporarily unavailable")
# A file the snippet opens by name (torch.save(obj, "model.pth") through a path in a variable, which the
# gate cannot see): Landlock refuses it, and torch says so in its own words.
FILE_MARKERS = ("open file failed", "permission denied", "read-only file system")

MEMORY_MARKERS = (
    "can't allocate memory",
    "not enough memory",
    "cannot allocate memory",
    "bad_alloc",
    "out of memory",
)


def _explain(error: dict | None, config: layers.ChildConfig) -> dict | None:
    """Give sandbox outcomes their own kind and a plain message, keeping what the run printed after its
    last step (``output``: a run cut by the clock past the step limit printed it unrecorded)."""
    if error is None:
        return None
    explained = _explained(error, config)
    if explained is not error and error.get("output"):
        explained["output"] = error["output"]
    return explained


def _explained(error: dict, config: layers.ChildConfig) -> dict:
    kind, error_type, message = error["kind"], error["type"], error["message"]
    if error_type == WallTimeReached.__name__:
        return error_dict("timeout", "Timeout", "timeout.wall_shown", {"seconds": config.wall_seconds},
                          error["line"])
    if error_type == CpuTimeReached.__name__:
        return error_dict("timeout", "CpuTimeout", "timeout.cpu_shown", {"seconds": config.cpu_seconds},
                          error["line"])
    lowered = message.lower()
    if kind == "runtime" and any(m in lowered for m in SHARED_MEMORY_MARKERS):
        return error_dict(kind, error_type, "runtime.no_shared_memory", {"detail": message[:1000]},
                          error["line"])
    if kind == "runtime" and any(m in lowered for m in THREAD_MARKERS):
        return error_dict(kind, error_type, "runtime.no_threads", {"detail": message[:1000]}, error["line"])
    if kind == "runtime" and (error_type == "PermissionError" or any(m in lowered for m in FILE_MARKERS)):
        return error_dict(kind, error_type, "runtime.no_files", {"detail": message[:1000]}, error["line"])
    if kind in ("runtime", "memory") and (
        error_type in ("MemoryError", "OutOfMemoryError") or any(m in message.lower() for m in MEMORY_MARKERS)
    ):
        return error_dict("memory", error_type, "memory.limit_detail",
                          {"mib": config.memory_mib, "detail": message[:300]}, error["line"])
    return error


def run_job(job: dict, config: layers.ChildConfig, stream: ResultStream | None = None) -> dict:
    code = job["code"]
    if not isinstance(code, str):
        raise TypeError("job code must be a string")
    gate = bool(job.get("gate", True))
    if gate:
        rejection = policy.check(code)
        if rejection is not None:
            return {
                "ok": False,
                "truncated": False,
                "steps": [],
                "error": error_dict("rejected", "PolicyError", rejection.code, rejection.params,
                                    rejection.line),
            }
    namespace = policy_builtins.safe_builtins() if gate else builtins
    limits = EngineLimits(max_steps=config.max_steps, max_stdout=config.max_stdout,
                          cuda_on_cpu=job.get("cuda_on_cpu") is True)
    signal.signal(signal.SIGALRM, _raiser(WallTimeReached))
    signal.signal(signal.SIGXCPU, _raiser(CpuTimeReached))
    signal.setitimer(signal.ITIMER_REAL, config.wall_seconds, ALARM_REPEAT)
    try:
        result = trace_delta(code, limits, builtins_namespace=namespace,
                             after_step=stream.after_step if stream is not None else None)
    except (WallTimeReached, CpuTimeReached) as exc:  # landed between the engine and us: rare
        result = {
            "ok": False,
            "truncated": False,
            "steps": [],
            "error": _error("runtime", type(exc).__name__, ""),
        }
    finally:
        _silence_stops()
    result["error"] = _explain(result.get("error"), config)
    if result["error"] is not None:
        result["ok"] = False
    return result


def _encode(value: Any) -> bytes:
    """Compact UTF-8 JSON. orjson writes a large trace 4-7x faster than the json module (90-200 ms of a
    real-size run's answer, on the request's path). What it refuses (an integer past 64 bits) goes
    through the json module. (orjson writes a float NaN or infinity as null; the engine never sends
    one: non-finite values travel as the strings "NaN" / "Infinity", app.engine.values.json_scalar.)"""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()


class _Frames:
    """Encoded steps packed into frames of at most ``FRAME_MAX`` bytes, in order; a step given in
    parts ends its frames with each part but the last, those frames flagged as going on."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self._parts: list[bytes] = []
        self._size = 2  # "[" and "]"

    def add(self, pieces: list[bytes]) -> None:
        for number, piece in enumerate(pieces):
            if self._parts and self._size + len(piece) + 1 > FRAME_MAX:
                self._close(continued=False)
            self._parts.append(piece)
            self._size += len(piece) + 1
            if number < len(pieces) - 1:
                self._close(continued=True)

    def done(self) -> list[bytes]:
        if self._parts:
            self._close(continued=False)
        return self.frames

    def _close(self, continued: bool) -> None:
        self.frames.append(encode_frame(b"[" + b",".join(self._parts) + b"]", continued))
        self._parts, self._size = [], 2


PART_ROOM = FRAME_MAX - 64 * 1024  # a part's collections fill this much (its first part's own fields: less)


def _step_parts(step: dict) -> list[bytes]:
    """A step too large for one frame as parts, each a step of its own (``line`` and a share of
    its facts) that fits a frame: the first holds every field that is not a collection of facts."""
    first = {key: value for key, value in step.items() if key not in SPLIT_FIELDS and key != "dropped"}
    parts: list[dict] = [first]
    room = PART_ROOM - len(_encode(first))
    for field in SPLIT_FIELDS:
        for key, value in (step.get(field) or {}).items():
            size = len(_encode({key: value}))
            if size > room and len(parts[-1]) > 1:
                parts.append({"line": step["line"]})
                room = PART_ROOM
            parts[-1].setdefault(field, {})[key] = value
            room -= size + len(field) + 4
    for kind, ids in (step.get("dropped") or {}).items():
        for ident in ids:
            size = len(_encode(ident)) + 1
            if size > room and len(parts[-1]) > 1:
                parts.append({"line": step["line"]})
                room = PART_ROOM
            parts[-1].setdefault("dropped", {}).setdefault(kind, []).append(ident)
            room -= size + len(kind) + 16
    return [_encode(part) for part in parts]


class ResultStream:
    """The answer on the result descriptor, as frames: the steps while the run makes them (a JSON
    array of the steps made since the last frame, at most every ``FLUSH_SECONDS``), then the envelope
    (a JSON object: format, ok, truncated, error). The server can start on the first steps while the
    run goes on (``app.sandbox.frames.read_answer``, ``app.sandbox.runner.AnswerReader``).

    The steps are encoded one by one against the cap, so a huge trace costs time proportional to the
    cap, not to its size: the steps past it are dropped and the envelope says so. Each frame is
    written whole, and counted as written, with the stop signals held back: a stop lands between two
    frames, never inside one (``_answer_now`` writes the rest and its envelope after them).
    """

    FLUSH_SECONDS = 0.05
    STOP_SIGNALS = frozenset({signal.SIGALRM, signal.SIGXCPU, signal.SIGPROF})

    def __init__(self, fd: int, max_bytes: int) -> None:
        self.fd = fd
        self.max_bytes = max_bytes
        self.budget = max_bytes - 8192  # room for the envelope and an error message
        self.size = 0
        self.sent = 0  # steps written (or dropped past the cap)
        self.cut: int | None = None  # the first step past the cap
        self._flushed_at = time.monotonic()

    def after_step(self, steps: list[dict]) -> None:
        """The engine made a step (``trace_delta``'s ``after_step``): write what is due."""
        if time.monotonic() - self._flushed_at >= self.FLUSH_SECONDS:
            self.flush(steps)

    def flush(self, steps: list[dict]) -> None:
        self._flushed_at = time.monotonic()
        if self.cut is not None or self.sent >= len(steps):
            return
        # The state moves only once the frames are written: a stop that lands while the steps are
        # being encoded (``_answer_now``, from a signal handler) finds it as it was, and writes them
        # itself. Frames hold at most FRAME_MAX bytes; a larger step goes in parts (``_step_parts``).
        frames = _Frames()
        size, cut = self.size, None
        for index in range(self.sent, len(steps)):
            encoded = _encode(steps[index])
            pieces = [encoded] if len(encoded) + 2 <= FRAME_MAX else _step_parts(steps[index])
            grown = size + sum(len(piece) + 1 for piece in pieces)
            if grown > self.budget:
                cut = index
                break
            frames.add(pieces)
            size = grown
        with self._stops_held():
            for frame in frames.done():
                write_all(self.fd, frame)
            self.size, self.cut, self.sent = size, cut, len(steps)

    def finish(self, result: dict) -> None:
        """The steps not written yet, then the envelope."""
        self.flush(result.get("steps", []))
        error = result.get("error")
        truncated = bool(result.get("truncated"))
        if self.cut is not None:
            truncated = True
            if error is None:
                error = error_dict("output", "ResultTooLarge", "output.trace_cut",
                                   {"mib": self.max_bytes // (1024 * 1024), "steps": self.cut})
        ok = bool(result.get("ok")) and error is None
        with self._stops_held():
            write_all(self.fd, encode_frame(_encode({"format": "delta", "ok": ok, "truncated": truncated,
                                                     "error": error})))

    @contextlib.contextmanager
    def _stops_held(self) -> Iterator[None]:
        """No stop signal is handled in the block (one that comes waits until it ends)."""
        held = signal.pthread_sigmask(signal.SIG_BLOCK, self.STOP_SIGNALS)
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)


def serve_one(
    job_fd: int,
    result_fd: int,
    config: layers.ChildConfig,
    uid: int | None,
    fork_server_pid: int,
    filters: Filters,
    warm: bool = True,
) -> None:
    """The whole life of a child. Never returns. ``warm``: warm up before the job (the server asks a
    child not to when it is busy: ``app.sandbox.pool``)."""
    try:
        facts = layers.harden(config, uid, (job_fd, result_fd), fork_server_pid, filters)
        # No seeding here: every run seeds torch's generator, random and numpy with 0 before the
        # snippet's first line (app.engine.run, reproducible permalinks), and what draws from the OS
        # (torch.seed(), random.seed(), os.urandom) draws fresh in every child. torch.seed() here
        # cost ~2 ms of each child's CPU (a lazy CUDA seeding that formats a stack trace, ~300 pages
        # copied from the fork server) and set nothing a run could see.
        if warm:
            warm_up(CHILD_WARM_UP)
        layers.limit_cpu(config.cpu_seconds)
        status = layers.status_fields()
        hello = {
            **facts,
            "pid": os.getpid(),
            "seccomp": int(status.get("Seccomp", "0")),
            "no_new_privs": int(status.get("NoNewPrivs", "0")),
            "threads": int(status.get("Threads", "0")),
            "env": sorted(os.environ),
        }
        write_all(result_fd, encode_frame(_encode(hello)))
    except BaseException:  # noqa: BLE001 - anything here means: do not run user code
        os._exit(EXIT_SETUP_FAILED)
    try:
        job = json.loads(read_frame(job_fd, config.max_job_bytes))
        os.close(job_fd)
        stream = ResultStream(result_fd, config.max_result_bytes)
        _FORCE.update(fd=result_fd, config=config, stream=stream)
        if job.get("kind") == "probe":
            write_all(result_fd, encode_frame(_encode(probe())))
        else:
            result = run_job(job, config, stream)
            sys.stdout = sys.stderr = None  # type: ignore[assignment] - nothing may write after this
            stream.finish(result)
        os.close(result_fd)  # EOF now: the server need not wait for this big process to unmap itself
    except MemoryError:
        _answer_memory(result_fd, config)
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_JOB_FAILED)
    os._exit(0)


def _answer_memory(result_fd: int, config: layers.ChildConfig) -> None:
    try:
        # The steps already written stand; no step is added now (making one may be what failed).
        error = error_dict("memory", "MemoryError", "memory.limit", {"mib": config.memory_mib})
        envelope = {"format": "delta", "ok": False, "truncated": True, "error": error}
        write_all(result_fd, encode_frame(_encode(envelope)))
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_JOB_FAILED)
    os._exit(0)


def probe() -> dict:
    """Start-up self-test: try what the layers must stop, from inside a real child (trusted code)."""
    import socket

    outcome: dict[str, Any] = {}

    def attempt(name: str, action: Any) -> None:
        try:
            action()
            outcome[name] = "allowed"
        except OSError as error:
            outcome[name] = errno_name(error)

    def fork() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)

    attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("fork", fork)
    attempt("write_file", lambda: open("probe.txt", "w").close())  # noqa: SIM115
    attempt(
        "read_outside", lambda: os.listdir(os.path.dirname(os.path.dirname(os.path.abspath(policy.__file__))))
    )
    attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
    try:  # not refused by the layers (torch starts threads): said as it is (``/healthz``'s isolation)
        started = threading.Thread(target=lambda: None)
        started.start()
        started.join()
        outcome["thread"] = "allowed"
    except RuntimeError:  # "can't start new thread"
        outcome["thread"] = "refused"
    status = layers.status_fields()
    outcome.update(
        uid=os.getuid(),
        gid=os.getgid(),
        groups=os.getgroups(),
        seccomp=int(status.get("Seccomp", "0")),
        capabilities=[status.get(k, "?") for k in ("CapEff", "CapPrm", "CapAmb")],
        no_new_privs=int(status.get("NoNewPrivs", "0")),
        dumpable=layers.prctl(layers.PR_GET_DUMPABLE),
        rlimits={
            name: resource.getrlimit(getattr(resource, f"RLIMIT_{name}"))
            for name in ("AS", "DATA", "CPU", "FSIZE", "NOFILE", "CORE", "NPROC")
        },
        env=sorted(os.environ),
        cwd_entries=len(os.listdir(".")),
    )
    return outcome


def errno_name(error: OSError) -> str:
    import errno

    return errno.errorcode.get(error.errno or 0, str(error.errno))
