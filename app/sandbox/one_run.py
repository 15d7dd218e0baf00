"""One run on one child: check its hello, write the job, read the answer while the run goes on,
learn how the child ended, classify.

The exit status comes from the fork server (the only process that may reap or kill a child, so pids
are never confused): ``Child.record`` is set by the pool's reader thread when the fork server says.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable

from app.config import Settings
from app.sandbox import frames
from app.sandbox.launch import Child
from app.sandbox.outcome import Limits, classify
from app.sandbox.proof import HELLO_TIMEOUT, hello_ok, read_hello
from app.sandbox.runner import AnswerReader, failed, parse_result
from app.sandbox.stop import RunStop
from app.schema import DeltaStep, DeltaTrace
from app.trace.consistency import Bounds

EXIT_TIMEOUT = 5.0
EXIT_GRACE = 0.5  # a child that sent an unusable answer: time to exit by itself before we kill it
WALL_GRACE = 1.0


def execute(child: Child, job: dict, bounds: Bounds, settings: Settings, limits: Limits, required: list[str],
            on_steps: Callable[[list[DeltaStep]], None] | None = None,
            stop: RunStop | None = None) -> DeltaTrace | None:
    """One run on ``child``; None when the child never got the job (the caller tries another). The
    caller closes the child afterwards."""
    hello = read_hello(child)
    if hello is None or not hello_ok(hello, child, required, settings.unsafe_dev):
        child.kill()
        if hello is not None:
            return failed("internal", "internal.unprotected_child", error_type="SandboxUnavailable")
        return None
    payload = json.dumps(job, ensure_ascii=False).encode()
    try:
        frames.write_before(child.job_fd, frames.encode_frame(payload), time.monotonic() + HELLO_TIMEOUT)
    except (OSError, frames.Deadline):
        child.kill()
        return None
    os.close(child.job_fd)
    child.job_fd = -1
    deadline = time.monotonic() + settings.wall_seconds + WALL_GRACE
    reader = AnswerReader(bounds, on_steps)  # reads the steps while the run goes on
    if stop is not None:  # the reader's Stop ends the child: its stream ends, read_answer returns
        stop.bind(child.kill)
    try:
        data, stopped, envelope = frames.read_answer(child.result_fd, settings.max_result_bytes,
                                                     deadline, reader.add)
    finally:
        if stop is not None:
            stop.unbind()
    if stop is not None and stop.requested and envelope is None:
        child.kill()
        child.record.event.wait(EXIT_TIMEOUT)
        return reader.stopped()
    # Whatever happened, the child must not outlive the request (it may have closed its end
    # early and gone on running). Killing an exiting child is harmless.
    killed = True
    answer = None
    if not stopped:
        answer = reader.result(envelope) if envelope is not None else \
            parse_result(data, settings.max_result_bytes, bounds)
        if answer.error is None or answer.error.kind != "internal":
            child.kill()
            return answer  # a well-formed answer: the exit status adds nothing
        # Unusable: learn how the child ended by itself before we end it, so that our own
        # SIGKILL is never mistaken for the kernel's OOM killer.
        killed = not child.record.event.wait(EXIT_GRACE)
    if killed:
        child.kill()
    if not child.record.event.wait(EXIT_TIMEOUT):
        child.kill()
        return failed("internal", "internal.unfinished")
    status = child.record.status
    return reader.kept(classify(data, stopped, status, child.record.cpu, limits,
                                killed_by_server=killed, bounds=bounds, answer=answer))
