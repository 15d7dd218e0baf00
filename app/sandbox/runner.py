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


class Runner(Protocol):
    async def run(self, code: str) -> DeltaTrace: ...


def failed(kind: str, code: str, params: dict[str, Param] | None = None,
           error_type: str = "SandboxError") -> DeltaTrace:
    """A run that ended without a usable trace, said by message ``code`` (``app.run_errors``)."""
    params = params or {}
    error = RunError(kind=kind, type=error_type, message=english(code, params), code=code, params=params)  # type: ignore[arg-type]
    return DeltaTrace(ok=False, steps=[], error=error)


def parse_result(data: bytes, max_bytes: int) -> DeltaTrace:
    try:
        body = decode_frame(data, max_bytes)
        with collector_paused():  # a large trace is a heap of small models: see app/heap.py
            return DeltaTrace.model_validate_json(body)
    except FrameError as error:
        return failed("internal", "internal.unusable_frame", {"detail": str(error)}, "UnusableAnswer")
    except (ValidationError, ValueError, RecursionError):
        return failed("internal", "internal.unusable_schema", error_type="UnusableAnswer")


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
        return parse_result(stdout, settings.max_result_bytes)
