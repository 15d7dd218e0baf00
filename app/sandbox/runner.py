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
from collections.abc import Callable
from typing import Protocol

from pydantic import TypeAdapter, ValidationError

from app.config import Settings
from app.heap import collector_paused
from app.run_errors import Param, english
from app.sandbox.frames import FrameError, decode_frame
from app.schema import DeltaStep, DeltaTrace, RunError
from app.trace.consistency import Bounds, Inconsistent, Problem, problem, step_checker, whole_problem
from app.trace.replay import Changes, State, apply


class Runner(Protocol):
    """Runs a snippet. A runner whose ``streams`` is true also takes ``on_steps`` in ``run``: the
    steps of each frame as it arrives, validated and checked (``AnswerReader``). The sandbox's runners
    also take ``cuda_on_cpu=True`` (given only when asked for: the code's cuda mapped to the CPU)."""

    async def run(self, code: str) -> DeltaTrace: ...


def as_asked(trace: DeltaTrace, cuda_on_cpu: bool) -> DeltaTrace:
    """The answer says it simulated cuda exactly when the request asked for it (the child's word on
    it is not taken: its bytes are hostile)."""
    if trace.cuda_on_cpu == cuda_on_cpu:
        return trace
    return trace.model_copy(update={"cuda_on_cpu": cuda_on_cpu})


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


STEPS = TypeAdapter(list[DeltaStep])


class AnswerReader:
    """``parse_result`` for an answer read frame by frame (``app.sandbox.frames.read_answer``): each
    frame of steps is validated, and its steps checked, as it arrives, so that when the run ends only
    the envelope is left to read. ``result`` gives what ``parse_result`` gives for the document the
    frames make (the tests compare the two). ``on_steps`` gets each frame's steps once they passed,
    in order, never one after a bad one: a reader that starts early (``app.web.streamed``)."""

    def __init__(self, bounds: Bounds | None = None,
                 on_steps: Callable[[list[DeltaStep]], None] | None = None) -> None:
        self.bounds = bounds or Bounds()
        self.on_steps = on_steps
        self.steps: list[DeltaStep] = []
        self.invalid = False  # a frame the schema refused: the whole answer is unusable
        self.found: Problem | None = None  # the first step the checks refused
        self._check = step_checker(self.bounds)
        self._state = State()

    def add(self, frame: bytes) -> None:
        """One frame of steps (a JSON array)."""
        if self.invalid:
            return
        try:
            with collector_paused():  # a large trace is a heap of small models: see app/heap.py
                steps = STEPS.validate_json(frame)
        except (ValidationError, ValueError, RecursionError):
            self.invalid = True
            return
        passed = steps
        if self.found is None:
            for index, delta in enumerate(steps):
                changes = Changes(len(self.steps) + index, delta)
                apply(self._state, delta, changes)
                try:
                    self._check(self._state, changes)
                except Inconsistent as refused:
                    self.found = refused.problem
                    passed = steps[:index]
                    break
            if passed and self.on_steps is not None:
                self.on_steps(passed)
        self.steps += steps  # counted, and kept for the steps before a bad one

    def result(self, envelope: bytes) -> DeltaTrace:
        """The answer, once its envelope came (the last frame: a JSON object without steps)."""
        try:
            # DeltaTrace's own rules for the envelope's fields; the steps were validated as they came
            head = DeltaTrace.model_validate_json(envelope.rstrip()[:-1] + b',"steps":[]}')
        except (ValidationError, ValueError, RecursionError):
            head = None
        if head is None or self.invalid:
            return failed("internal", "internal.unusable_schema", error_type="UnusableAnswer")
        trace = head.model_copy(update={"steps": self.steps})
        found = whole_problem(trace, self.bounds) or self.found
        return trace if found is None else unusable(trace, found)


    def kept(self, failure: DeltaTrace) -> DeltaTrace:
        """A run the server ended itself (its deadline, its size cap, a signal: ``outcome.classify``)
        keeps the steps that reached the server before, as a run its own limit stopped does: they
        were validated and checked as they came, and the reader handed them on. A failure of ours
        (``internal``), an answer with steps of its own or a frame the schema refused keeps its verdict."""
        error = failure.error
        if failure.steps or self.invalid or error is None or error.kind == "internal":
            return failure
        passed = self.steps[: self.found.step or 0] if self.found is not None else self.steps
        passed = passed[: self.bounds.max_steps] if self.bounds.max_steps is not None else passed
        if not passed:
            return failure
        if error.code in STEPS_SHOWN:
            error = failed(error.kind, STEPS_SHOWN[error.code], dict(error.params), error.type).error
        return DeltaTrace(ok=False, truncated=True, error=error, steps=passed)


# A limit's message, and the same message when the steps up to the stop are shown.
STEPS_SHOWN = {"timeout.wall": "timeout.wall_shown", "timeout.cpu": "timeout.cpu_shown"}


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

    async def run(self, code: str, *, cuda_on_cpu: bool = False) -> DeltaTrace:
        settings = self.settings
        job = json.dumps(
            {"code": code, "max_steps": settings.max_steps, "max_stdout": settings.max_stdout_bytes,
             "cuda_on_cpu": cuda_on_cpu}
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
        trace = parse_result(stdout, settings.max_result_bytes, bounds_for(code, settings))
        return as_asked(trace, cuda_on_cpu)
