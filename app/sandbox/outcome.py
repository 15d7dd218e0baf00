"""Turn what the server saw of one child (bytes, its own timers, the exit status) into a ``DeltaTrace``.

The status comes from the server's timers and the kernel's wait status, never from the child's words;
the child's frame is used only when it exited normally, and then only after schema validation.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

from app.sandbox.runner import failed, parse_result
from app.schema import DeltaTrace
from app.trace.consistency import Bounds

EXIT_SETUP_FAILED, EXIT_FORK_SERVER_GONE, EXIT_JOB_FAILED = 71, 72, 73


@dataclass(frozen=True)
class Limits:
    wall_seconds: float
    cpu_seconds: int
    memory_mib: int
    max_result_bytes: int


UNUSABLE = "The sandbox returned an unusable answer, so the run cannot be shown. Please run it again."


def classify(
    data: bytes,
    stopped: str | None,
    status: int | None,
    cpu: float,
    limits: Limits,
    killed_by_server: bool = False,
    bounds: Bounds | None = None,
) -> DeltaTrace:
    """``stopped``: why the server killed the child ("deadline", "too_big") or None;
    ``killed_by_server``: the server sent SIGKILL itself (after an unusable answer); ``bounds``: what
    the answer must stay within (``app.trace.consistency``)."""
    if stopped == "deadline":
        return failed(
            "timeout", f"The snippet ran longer than {limits.wall_seconds:g} s and was stopped.", "Timeout"
        )
    if stopped == "too_big":
        return failed(
            "output",
            f"The snippet's trace is larger than {limits.max_result_bytes // (1024 * 1024)} "
            "MiB and was stopped.",
            "ResultTooLarge",
        )
    if status is None:
        return failed("internal", "The sandbox restarted while the snippet ran. Please run it again.")
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) == signal.SIGKILL and killed_by_server and cpu < limits.cpu_seconds:
            return failed("internal", UNUSABLE, "UnusableAnswer")  # our kill, not the OOM killer
        return _signalled(os.WTERMSIG(status), cpu, limits)
    code = os.WEXITSTATUS(status)
    if code == 0:
        return parse_result(data, limits.max_result_bytes, bounds)
    if code in (EXIT_SETUP_FAILED, EXIT_FORK_SERVER_GONE, EXIT_JOB_FAILED):
        return failed("internal", f"The sandboxed process failed (status {code}) before it could answer.")
    return failed(
        "runtime",
        f"The snippet ended its process (exit status {code}) before the trace was complete.",
        "ProcessExit",
    )


def _signalled(sig: int, cpu: float, limits: Limits) -> DeltaTrace:
    name = _signal_name(sig)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_seconds):
        return failed(
            "timeout",
            f"The snippet used more than {limits.cpu_seconds} s of CPU time and was stopped.",
            "CpuTimeout",
        )
    if sig == signal.SIGKILL:
        # Not ours (``killed_by_server`` above): the kernel's OOM killer picks children first.
        return failed(
            "memory",
            f"The system stopped the snippet, most likely because it used too much memory "
            f"(the playground allows {limits.memory_mib} MiB per run).",
        )
    if sig == signal.SIGSYS:
        return failed(
            "rejected",
            "The snippet made a system call that the playground does not allow.",
            "ForbiddenSystemCall",
        )
    if sig == signal.SIGXFSZ:
        return failed(
            "rejected",
            "The snippet tried to write a file; the playground has no files to write.",
            "FileWrite",
        )
    return failed("runtime", f"The snippet crashed its Python process ({name}).", "Crash")


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
