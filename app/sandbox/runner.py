"""Run one snippet in a child process and turn whatever happens into a trace (``DeltaTrace``).

This is the plain one-process-per-run runner. It never executes user code in the server process,
and it treats the child's output as hostile: one bounded frame, validated against the schema.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from typing import Protocol

from pydantic import ValidationError

from app.config import Settings
from app.heap import collector_paused
from app.run_errors import Param, english
from app.sandbox.frames import FrameError, decode_frame
from app.schema import DeltaTrace, RunError
from app.trace.consistency import Bounds, Problem, problem


class Runner(Protocol):
    """Runs a snippet. A runner whose ``streams`` is true also takes ``on_steps`` in ``run``: each
    frame of steps as it arrives (``app.sandbox.frames.read_answer``)."""

    async def run(self, code: str) -> DeltaTrace: ...


def failed(kind: str, code: str, params: dict[str, Param] | None = None,
           error_type: str = "SandboxError") -> DeltaTrace:
    """A run that ended without a usable trace, said by message ``code`` (``app.run_errors``)."""
    params = params or {}
    error = RunError(kind=kind, type=error_type, message=english(code, params), code=code, params=params)  # type: ignore[arg-type]
    return DeltaTrace(ok=False, steps=[], error=error)


def parse_result(data: bytes, max_bytes: int, bounds: Bounds | None = None) -> DeltaTrace:
    """The child's frame as a trace: schema-valid, then consistent (``app.trace.consistency``: a
    snippet that took over its process can write any bytes), or an ``UnusableAnswer`` error."""
    try:
        body = decode_frame(data, max_bytes)
        with collector_paused():  # a large trace is a heap of small models: see app/heap.py
            trace = DeltaTrace.model_validate_json(body)
            found = problem(trace, bounds or Bounds())
    except FrameError as error:
        return failed("internal", "internal.unusable_frame", {"detail": str(error)}, "UnusableAnswer")
    except (ValidationError, ValueError, RecursionError):
        return failed("internal", "internal.unusable_schema", error_type="UnusableAnswer")
    return trace if found is None else unusable(trace, found)


def unusable(trace: DeltaTrace, found: Problem) -> DeltaTrace:
    """An inconsistent trace: the steps before the first bad one (each checked, so as safe to show as
    any trace) and an error that says what was wrong. The answer's own error is not repeated: it came
    with the bad bytes."""
    kept = trace.steps[:found.step] if found.step is not None else []
    detail = str(found)[:1000]
    error = failed("internal", "internal.unusable_trace" if kept else "internal.unusable_trace_whole",
                   {"detail": detail, "kept": len(kept)}, "UnusableAnswer").error
    return DeltaTrace(ok=False, error=error, steps=kept)


def bounds_for(code: str, settings: Settings) -> Bounds:
    """What an honest run of ``code`` stays within. Lines: an upper bound (Python also ends a line
    at a lone carriage return)."""
    return Bounds(lines=code.count("\n") + code.count("\r") + 1, max_steps=settings.max_steps,
                  max_stdout=settings.max_stdout_bytes)


class SubprocessRunner:
    """A fresh ``python -m app.sandbox.worker`` per run (slow: it imports torch every time), with none
    of the sandbox's layers: for debugging the engine on a private machine only."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def health(self) -> dict:
        return {"ok": True, "runner": "subprocess", "unsafe_dev": True, "layers": {},
                "warning": "snippets run unconfined (EXPLORER_SANDBOX=subprocess)"}

    async def run(self, code: str) -> DeltaTrace:
        settings = self.settings
        job = json.dumps(
            {"code": code, "max_steps": settings.max_steps, "max_stdout": settings.max_stdout_bytes}
        ).encode()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app.sandbox.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
            },
        )
        try:
            # Generous: this runner pays for `import torch` (about 2 s) on every run.
            stdout, _ = await asyncio.wait_for(process.communicate(job), settings.wall_seconds + 10)
        except TimeoutError:
            os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return failed("timeout", "timeout.wall", {"seconds": settings.wall_seconds})
        if process.returncode != 0 and not stdout:
            return failed("internal", "internal.worker_crashed", {"status": process.returncode})
        return parse_result(stdout, settings.max_result_bytes, bounds_for(code, settings))
