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

import orjson
from pydantic import TypeAdapter, ValidationError

from app.config import Settings
from app.heap import collector_paused
from app.run_errors import Param, english
from app.sandbox.frames import SPLIT_FIELDS, FrameError, decode_frame
from app.schema import DeltaStep, DeltaTrace, Dropped, RunError
from app.trace.consistency import (
    Bounds,
    Inconsistent,
    Problem,
    ok_problem,
    over_bounds,
    problem,
    step_checker,
    weight,
)
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
    snippet that took over its process can write any bytes), or an ``UnusableAnswer`` error. Its
    steps are counted before a model of any is built (``too_many``)."""
    bounds = bounds or Bounds()
    try:
        body = decode_frame(data, max_bytes)
        with collector_paused():  # a large trace is a heap of small models: see app/heap.py
            document = orjson.loads(body)
            steps = document.get("steps") if isinstance(document, dict) else None
            if isinstance(steps, list):
                refused = over_bounds(len(steps), parsed_weight(steps), bounds)
                if refused is not None:
                    return unusable(DeltaTrace(ok=False, steps=[]), refused)
            trace = DeltaTrace.model_validate(document)
            found = problem(trace, bounds, counted=isinstance(steps, list))
    except FrameError as error:
        return failed("internal", "internal.unusable_frame", {"detail": str(error)}, "UnusableAnswer")
    except (ValidationError, ValueError, RecursionError):
        return failed("internal", "internal.unusable_schema", error_type="UnusableAnswer")
    return trace if found is None else unusable(trace, found)


def parsed_weight(steps: list) -> int:
    """``weight`` of steps as parsed from JSON (not yet validated: what is not a collection counts
    nothing, and the schema refuses it next)."""
    facts = names = 0
    for step in steps:
        if not isinstance(step, dict):
            continue
        for field in FACT_FIELDS:
            found = step.get(field)
            facts += len(found) if isinstance(found, dict) else 0
        found = step.get("variables")
        names += len(found) if isinstance(found, dict) else 0
        dropped = step.get("dropped")
        if isinstance(dropped, dict):
            names += sum(len(ids) for ids in dropped.values() if isinstance(ids, list))
    return weight(facts, names)


FACT_FIELDS = SPLIT_FIELDS[1:]  # the facts among them: all but the names


STEPS = TypeAdapter(list[DeltaStep])
PART_FIELDS = frozenset({"line", "dropped", *SPLIT_FIELDS})


def joined(first: DeltaStep, part: DeltaStep) -> DeltaStep:
    """A step sent in parts (``app.sandbox.child._step_parts``) made whole: ``part`` holds only more
    of its facts (``ValueError`` when it holds anything else, or a fact the step has already)."""
    if part.line != first.line or part.model_fields_set - PART_FIELDS:
        raise ValueError("a step's part that is not only more of its facts")
    update: dict[str, object] = {}
    for field in SPLIT_FIELDS:
        mine, more = getattr(first, field), getattr(part, field)
        if more:
            if mine.keys() & more.keys():
                raise ValueError(f"a step's {field} sent twice")
            update[field] = {**mine, **more}
    if part.dropped:
        update["dropped"] = Dropped(**{kind: getattr(first.dropped, kind) + getattr(part.dropped, kind)
                                       for kind in Dropped.model_fields})
    return first.model_copy(update=update)


class AnswerReader:
    """``parse_result`` for an answer read frame by frame (``app.sandbox.frames.read_answer``): each
    frame of steps is validated, and its steps checked, as it arrives, so that when the run ends only
    the envelope is left to read. ``result`` gives what ``parse_result`` gives for the document the
    frames make (the tests compare the two). ``on_steps`` gets each frame's steps once they passed,
    in order, never one after a bad one: a reader that starts early (``app.web.streamed``).

    Counts come before models: a frame's steps are counted from its parsed JSON (one frame at most
    ``FRAME_MAX`` bytes) before pydantic builds any, and an answer past ``bounds.max_steps`` builds
    no more. A step sent in parts (its frame ``continued``) is joined before it is checked."""

    def __init__(self, bounds: Bounds | None = None,
                 on_steps: Callable[[list[DeltaStep]], None] | None = None) -> None:
        self.bounds = bounds or Bounds()
        self.on_steps = on_steps
        self.steps: list[DeltaStep] = []
        self.invalid = False  # a frame the schema refused: the whole answer is unusable
        self.over: Problem | None = None  # past the bounds' counts: refused as a whole
        self.found: Problem | None = None  # the first step the checks refused
        self.count = 0  # steps sent so far (a step sent in parts counts once)
        self.weight = 0  # and their entries' weight (app.trace.consistency.weight)
        self._going_on: DeltaStep | None = None  # a step whose next part is in the next frame
        self._check = step_checker(self.bounds)
        self._state = State()

    def add(self, frame: bytes, continued: bool = False) -> None:
        """One frame of steps (a JSON array); ``continued``: its last step goes on in the next."""
        if self.over is not None:
            return
        try:
            with collector_paused():  # a large trace is a heap of small models: see app/heap.py
                parsed = orjson.loads(frame)
                if not isinstance(parsed, list):
                    raise ValueError("not a list of steps")
                self.count += len(parsed) - (self._going_on is not None)
                self.weight += parsed_weight(parsed)
                self.over = over_bounds(self.count, self.weight, self.bounds)
                if self.over is not None:
                    self._going_on = None
                    return
                if self.invalid:
                    return  # counted only: the answer is unusable whatever follows
                steps = STEPS.validate_python(parsed)
                del parsed
                if self._going_on is not None and steps:
                    steps[0] = joined(self._going_on, steps[0])
                    self._going_on = None
                if continued and steps:
                    self._going_on = steps.pop()
        except (ValidationError, ValueError, RecursionError):
            self.invalid, self._going_on = True, None
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
        if self.over is not None:
            return unusable(DeltaTrace(ok=False, steps=[]), self.over)
        try:
            # DeltaTrace's own rules for the envelope's fields; the steps were validated as they came
            head = DeltaTrace.model_validate_json(envelope.rstrip()[:-1] + b',"steps":[]}')
        except (ValidationError, ValueError, RecursionError):
            head = None
        if head is None or self.invalid or self._going_on is not None:  # (a step left in parts)
            return failed("internal", "internal.unusable_schema", error_type="UnusableAnswer")
        trace = head.model_copy(update={"steps": self.steps})
        found = ok_problem(trace) or self.found  # (its steps were counted as they came: ``add``)
        return trace if found is None else unusable(trace, found)

    def stopped(self) -> DeltaTrace:
        """The answer of a run its reader stopped (``app.sandbox.stop``): the steps handed on so far,
        kept as ``kept`` keeps them."""
        return self.kept(failed("timeout", "timeout.stopped", {"steps": len(self._passed())}, "Stopped"))

    def _passed(self) -> list[DeltaStep]:
        """The steps handed on: before the first bad one, within the run's step bound."""
        passed = self.steps[: self.found.step or 0] if self.found is not None else self.steps
        return passed[: self.bounds.max_steps] if self.bounds.max_steps is not None else passed

    def kept(self, failure: DeltaTrace) -> DeltaTrace:
        """A run the server ended itself (its deadline, its size cap, a signal: ``outcome.classify``)
        keeps the steps that reached the server before, as a run its own limit stopped does: they
        were validated and checked as they came, and the reader handed them on. A failure of ours
        (``internal``), an answer with steps of its own or a frame the schema refused keeps its verdict."""
        error = failure.error
        if failure.steps or self.invalid or error is None or error.kind == "internal":
            return failure
        passed = self._passed()
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
                  max_stdout=settings.max_stdout_bytes,
                  max_weight=settings.max_result_bytes // BYTES_PER_WEIGHT)


# An answer's entries may weigh one unit per this many bytes of the answer's cap (8 MiB: 524,288,
# i.e. at most ~131,000 facts, ~120 MiB of models). The engine's answers weigh one unit per 32-37
# bytes at the least (lines that bind eight names to one tensor; lists of 3,000 tensors made and
# deleted), 46-50 in one-line lists and dicts of 5,000-20,000 tensors and in loops, 62 and 105 for
# the leak ×3000 and AdamW ×200.
BYTES_PER_WEIGHT = 16


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
