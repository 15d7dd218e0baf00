"""A snippet run in this process: the library entry's runner (``autograd_explorer.trace``) and the
command line's (``python -m app render``).

It is the caller's code on the caller's machine, so there is no sandbox and no policy gate: the same
engine (``app.engine.trace_delta``) runs the code with the builtins of a plain run, held to the server's
limits where a process can hold itself to them — steps, printed output, the size of the trace (cut as
the sandbox's answer is cut), and the wall clock (a stop raised into the snippet, as in the sandbox's
child, when this is the main thread and its interval timer is free). The CPU and memory limits are the
sandbox's OS limits and do not apply here; ``Ctrl-C`` stops a run as it stops any code. The trace is
validated by the one schema (``DeltaTrace``) like every answer.

The engine seeds torch's and Python's generators so that a run draws the numbers the playground
draws; the caller's generator states are put back afterwards, so a notebook's later cells draw what
they would have drawn. When the code runs on a real CUDA device, ``torch.cuda.memory_allocated()`` is
read after each step, beside the model of ``app.trace.gpu``.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
from collections.abc import Iterator
from dataclasses import dataclass, fields
from types import FrameType
from typing import Any

import orjson
import torch

from app.engine import EngineLimits, trace_delta
from app.engine.tracer import SNIPPET_FILENAME
from app.render.notices import RunLimits
from app.run_errors import error_dict
from app.schema import DeltaTrace

ALARM_REPEAT = 0.05  # seconds between the stops once the wall limit has passed (the child's, too)
ENVELOPE_ROOM = 8192  # what the sandbox's answer keeps free under its cap for the envelope


class WallTimeReached(BaseException):  # noqa: N818 - named for what the learner sees
    """Raised into the snippet when the wall-clock limit is spent."""


@dataclass(frozen=True)
class LocalRun:
    code: str
    trace: DeltaTrace
    limits: RunLimits
    # torch.cuda.memory_allocated() after each step, when the code used a CUDA device
    measured: tuple[int, ...] | None = None


def run_here(code: str, limits: RunLimits | None = None, namespace: dict[str, Any] | None = None,
             cuda_on_cpu: bool = False) -> LocalRun:
    """Trace ``code`` in this process. ``namespace``: the dict it runs in (a notebook cell's
    variables); by default a fresh one, emptied when the run ends. ``cuda_on_cpu``: code written for a
    GPU runs on the CPU, shown as what it asked for (the engine's option, as the server's API has it)."""
    limits = limits or RunLimits()
    options: dict[str, Any] = {"max_steps": limits.max_steps, "max_stdout": limits.max_stdout_bytes}
    if cuda_on_cpu:
        if "cuda_on_cpu" not in {f.name for f in fields(EngineLimits)}:
            raise NotImplementedError("this version's engine cannot run CUDA code on the CPU")
        options["cuda_on_cpu"] = True
    engine = EngineLimits(**options)
    # a simulated device's memory_allocated() is the model's, not a measurement: none is read then
    cuda = _CudaReadings(enabled=not cuda_on_cpu)
    with _caller_generators(), _wall_limit(limits.wall_seconds) as stopped:
        raw = trace_delta(code, engine, after_step=cuda.after_step, namespace=namespace)
    if stopped() and raw.get("error") and raw["error"]["type"] == WallTimeReached.__name__:
        raw["error"] = error_dict("timeout", "Timeout", "timeout.wall_shown",
                                  {"seconds": limits.wall_seconds}, raw["error"].get("line"))
    _cut_to_size(raw, limits.max_result_bytes)
    trace = DeltaTrace.model_validate(raw)
    return LocalRun(code, trace, limits, cuda.readings(len(trace.steps)))


def _cut_to_size(raw: dict[str, Any], max_bytes: int) -> None:
    """The steps that fit the sandbox's answer cap, as its child cuts them (``ResultStream``): each
    step encoded in turn against the cap less the envelope's room; the first that does not fit and
    all after it are dropped, and the error says so."""
    budget, size = max_bytes - ENVELOPE_ROOM, 0
    for index, step in enumerate(raw["steps"]):
        size += len(orjson.dumps(step, option=orjson.OPT_NON_STR_KEYS)) + 1
        if size > budget:
            del raw["steps"][index:]
            raw["truncated"] = True
            if raw.get("error") is None:
                raw["error"] = error_dict("output", "ResultTooLarge", "output.trace_cut",
                                          {"mib": max_bytes // (1024 * 1024), "steps": index})
                raw["ok"] = False
            return


class _CudaReadings:
    """``torch.cuda.memory_allocated()`` after each step, once the snippet has used CUDA (never
    initialising CUDA itself: on a machine without one, nothing is read)."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.values: list[int | None] = []

    def after_step(self, steps: list[dict[str, Any]]) -> None:
        value = torch.cuda.memory_allocated() if self.enabled and torch.cuda.is_initialized() else None
        self.values.extend([None] * (len(steps) - 1 - len(self.values)))
        self.values.append(value)

    def readings(self, count: int) -> tuple[int, ...] | None:
        if not any(v is not None for v in self.values):
            return None
        values = (self.values + [None] * count)[:count]
        return tuple(v or 0 for v in values)  # before the first CUDA call: nothing allocated there


@contextlib.contextmanager
def _caller_generators() -> Iterator[None]:
    """The engine seeds the generators (the playground's numbers); the caller gets its own back."""
    python_state = random.getstate()
    torch_state = torch.get_rng_state()
    cuda_states = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
    try:
        yield
    finally:
        random.setstate(python_state)
        torch.set_rng_state(torch_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def _inside_snippet(frame: FrameType | None) -> bool:
    """Stop only where the snippet's own code is on the stack: never inside the engine's reading."""
    while frame is not None:
        if frame.f_code.co_filename == SNIPPET_FILENAME:
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def _wall_limit(seconds: float) -> Iterator[Any]:
    """Raise ``WallTimeReached`` into the snippet once ``seconds`` have passed (then every
    ``ALARM_REPEAT`` s, until it stops). Only the main thread receives signals, and only a free
    interval timer is ours to take: elsewhere there is no wall limit. Yields "did it fire"."""
    fired = [False]
    usable = (threading.current_thread() is threading.main_thread() and seconds > 0
              and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0))
    if not usable:
        yield lambda: False
        return

    def stop(_signum: int, frame: FrameType | None) -> None:
        if _inside_snippet(frame):
            fired[0] = True
            raise WallTimeReached

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds, ALARM_REPEAT)
    try:
        yield lambda: fired[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
