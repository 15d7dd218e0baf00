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


def classify(
    data: bytes,
    stopped: str | None,
    status: int | None,
    cpu: float,
    limits: Limits,
    killed_by_server: bool = False,
    bounds: Bounds | None = None,
    answer: DeltaTrace | None = None,
) -> DeltaTrace:
    """``stopped``: why the server killed the child ("deadline", "too_big") or None;
    ``killed_by_server``: the server sent SIGKILL itself (after an unusable answer); ``bounds``: what
    the answer must stay within (``app.trace.consistency``); ``answer``: ``data`` already read (as
    ``parse_result`` reads it), not read again."""
    if stopped == "deadline":
        return failed("timeout", "timeout.wall", {"seconds": limits.wall_seconds}, "Timeout")
    if stopped == "too_big":
        return failed("output", "output.trace_stopped", {"mib": limits.max_result_bytes // (1024 * 1024)},
                      "ResultTooLarge")
    if status is None:
        return failed("internal", "internal.restarted")
    if os.WIFSIGNALED(status):
        if os.WTERMSIG(status) == signal.SIGKILL and killed_by_server and cpu < limits.cpu_seconds:
            # our kill, not the OOM killer's
            return failed("internal", "internal.unusable", error_type="UnusableAnswer")
        return _signalled(os.WTERMSIG(status), cpu, limits)
    code = os.WEXITSTATUS(status)
    if code == 0:
        return answer if answer is not None else parse_result(data, limits.max_result_bytes, bounds)
    if code in (EXIT_SETUP_FAILED, EXIT_FORK_SERVER_GONE, EXIT_JOB_FAILED):
        return failed("internal", "internal.process_failed", {"status": code})
    return failed("runtime", "runtime.process_exit", {"status": code}, "ProcessExit")


def _signalled(sig: int, cpu: float, limits: Limits) -> DeltaTrace:
    name = _signal_name(sig)
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= limits.cpu_seconds):
        return failed("timeout", "timeout.cpu", {"seconds": limits.cpu_seconds}, "CpuTimeout")
    if sig == signal.SIGKILL:
        # Not ours (``killed_by_server`` above): the kernel's OOM killer picks children first.
        return failed("memory", "memory.killed", {"mib": limits.memory_mib})
    if sig == signal.SIGSYS:
        return failed("rejected", "rejected.syscall", error_type="ForbiddenSystemCall")
    if sig == signal.SIGXFSZ:
        return failed("rejected", "rejected.file_write", error_type="FileWrite")
    return failed("runtime", "runtime.crash", {"signal": name}, "Crash")


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"
