"""One forked child: sandbox itself, warm up, say hello, run exactly one job, answer, exit.

Everything before the job is read is trusted code. The job (the snippet) can do anything the OS layers
allow, including forging its own answer; the server copes (strict framing, schema, exit status).

Pipes: the child reads one frame (the job) from ``job_fd`` and writes two frames on ``result_fd``:
first the hello (the layers in force, written before any user input exists), then the result.
"""

from __future__ import annotations

import builtins
import json
import os
import random
import resource
import signal
import sys
from typing import Any

import torch

from app import policy
from app.engine import EngineLimits, trace_delta, trace_snippet
from app.engine.tracer import SNIPPET_FILENAME
from app.sandbox import layers
from app.sandbox.frames import encode_frame, read_frame, write_all
from app.sandbox.seccomp import Libseccomp

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
        if _inside_snippet(frame):
            raise exception

    return handler


# In the child, a short one: the fork server already ran WARM_UP (lazy initialisation is shared), so
# this only copies-on-write the pages every run touches (the engine, the tracer, common ops). Measured
# for the 6-line clone/detach snippet: request path -2 ms for +2 ms of CPU before the request.
CHILD_WARM_UP = """\
a = torch.ones(3, requires_grad=True)
b = a.clone()
c = a.detach()
c.add_(1)
"""


def warm_up(source: str = WARM_UP) -> None:
    """Fault in the code and data pages a run touches, so the request path pays none of it."""
    policy.check(source)
    trace_snippet(source, EngineLimits(max_steps=50, max_stdout=4096))


def _error(kind: str, error_type: str, message: str, line: int | None = None) -> dict:
    return {"kind": kind, "type": error_type, "message": message[:4000], "line": line}


# Where the sandbox differs from a plain run, the error says so (issue #11, 3).
SHARED_MEMORY_MARKERS = ("shared memory", "shm_open", "/dev/shm", "share_memory", "torch_shm_manager")
THREAD_MARKERS = ("can't start new thread", "can't start a new thread", "resource temporarily unavailable")

MEMORY_MARKERS = (
    "can't allocate memory",
    "not enough memory",
    "cannot allocate memory",
    "bad_alloc",
    "out of memory",
)


def _explain(error: dict | None, config: layers.ChildConfig) -> dict | None:
    """Give sandbox outcomes their own kind and a plain message."""
    if error is None:
        return None
    kind, error_type, message = error["kind"], error["type"], error["message"]
    if error_type == WallTimeReached.__name__:
        return _error(
            "timeout",
            "Timeout",
            f"The snippet ran longer than {config.wall_seconds:g} s and was "
            "stopped. The steps up to there are shown.",
            error["line"],
        )
    if error_type == CpuTimeReached.__name__:
        return _error(
            "timeout",
            "CpuTimeout",
            f"The snippet used more than {config.cpu_seconds} s of CPU time "
            "and was stopped. The steps up to there are shown.",
            error["line"],
        )
    lowered = message.lower()
    if kind == "runtime" and any(m in lowered for m in SHARED_MEMORY_MARKERS):
        return _error(kind, error_type, f"{message[:1000]}\n(The playground's sandbox has no shared memory: "
                      "share_memory_() and DataLoader workers cannot work here; use num_workers=0.)",
                      error["line"])
    if kind == "runtime" and any(m in lowered for m in THREAD_MARKERS):
        return _error(kind, error_type, f"{message[:1000]}\n(The playground's sandbox runs a snippet in one "
                      "process, on one thread: no new processes or threads; use num_workers=0.)",
                      error["line"])
    if kind in ("runtime", "memory") and (
        error_type in ("MemoryError", "OutOfMemoryError") or any(m in message.lower() for m in MEMORY_MARKERS)
    ):
        return _error(
            "memory",
            error_type,
            f"The snippet ran out of memory: the playground allows "
            f"{config.memory_mib} MiB per run. ({message[:300]})",
            error["line"],
        )
    return error


def run_job(job: dict, config: layers.ChildConfig) -> dict:
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
                "error": _error("rejected", "PolicyError", rejection.message, rejection.line),
            }
    namespace = policy.safe_builtins() if gate else builtins
    limits = EngineLimits(max_steps=config.max_steps, max_stdout=config.max_stdout)
    signal.signal(signal.SIGALRM, _raiser(WallTimeReached))
    signal.signal(signal.SIGXCPU, _raiser(CpuTimeReached))
    signal.setitimer(signal.ITIMER_REAL, config.wall_seconds, ALARM_REPEAT)
    try:
        result = trace_delta(code, limits, builtins_namespace=namespace)
    except (WallTimeReached, CpuTimeReached) as exc:  # landed between the engine and us: rare
        result = {
            "ok": False,
            "truncated": False,
            "steps": [],
            "error": _error("runtime", type(exc).__name__, ""),
        }
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_IGN)
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    result["error"] = _explain(result.get("error"), config)
    if result["error"] is not None:
        result["ok"] = False
    return result


def _dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def encode_result(result: dict, max_bytes: int) -> bytes:
    """The (delta) trace as one JSON document of at most ``max_bytes``, dropping trailing steps if needed.

    Steps are encoded one by one so that a huge trace costs time proportional to the cap, not to its size.
    """
    error = result.get("error")
    budget = max_bytes - 8192  # room for the envelope and an error message
    parts: list[bytes] = []
    size = 0
    truncated = bool(result.get("truncated"))
    steps = result.get("steps", [])
    for index, step in enumerate(steps):
        encoded = _dumps(step).encode()
        if size + len(encoded) + 1 > budget:
            truncated = True
            if error is None:
                error = _error(
                    "output",
                    "ResultTooLarge",
                    f"The trace is larger than {max_bytes // (1024 * 1024)} "
                    f"MiB; only the first {index} steps are shown.",
                )
            break
        parts.append(encoded)
        size += len(encoded) + 1
    ok = bool(result.get("ok")) and error is None
    head = _dumps({"format": "delta", "ok": ok, "truncated": truncated, "error": error})
    return head[:-1].encode() + b',"steps":[' + b",".join(parts) + b"]}"


def serve_one(
    job_fd: int,
    result_fd: int,
    config: layers.ChildConfig,
    uid: int | None,
    fork_server_pid: int,
    libseccomp: Libseccomp,
) -> None:
    """The whole life of a child. Never returns."""
    try:
        facts = layers.harden(config, uid, (job_fd, result_fd), fork_server_pid, libseccomp)
        # Fresh randomness per child: the fork server's state must not predict a child's
        # (the engine then seeds torch and random with 0 per run, for reproducible permalinks).
        random.seed()
        torch.seed()
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
        write_all(result_fd, encode_frame(_dumps(hello).encode()))
    except BaseException:  # noqa: BLE001 - anything here means: do not run user code
        os._exit(EXIT_SETUP_FAILED)
    try:
        job = json.loads(read_frame(job_fd, config.max_job_bytes))
        os.close(job_fd)
        if job.get("kind") == "probe":
            result_bytes = _dumps(probe()).encode()
        else:
            result_bytes = encode_result(run_job(job, config), config.max_result_bytes)
        sys.stdout = sys.stderr = None  # type: ignore[assignment] - nothing may write after this
        write_all(result_fd, encode_frame(result_bytes))
        os.close(result_fd)  # EOF now: the server need not wait for this big process to unmap itself
    except MemoryError:
        _answer_memory(result_fd, config)
    except BaseException:  # noqa: BLE001
        os._exit(EXIT_JOB_FAILED)
    os._exit(0)


def _answer_memory(result_fd: int, config: layers.ChildConfig) -> None:
    try:
        error = _error(
            "memory",
            "MemoryError",
            f"The snippet ran out of memory: the playground allows {config.memory_mib} MiB per run.",
        )
        write_all(
            result_fd,
            encode_frame(_dumps({"format": "delta", "ok": False, "truncated": True, "error": error,
                                 "steps": []}).encode()),
        )
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
