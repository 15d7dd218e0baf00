"""What the page says about how a run ended: the snippet's own error, or the one limit that cut it.

A run stops early for exactly one reason, and the page says that one, with its figure: the step
limit ("stopped at the limit of 10,000 steps"), the time limit ("stopped at the 5 s limit after 2,310
steps"), the size of its trace, its memory, or how much it printed. The sandbox reports these as
error kinds (``app/sandbox/child.py::_explain`` and ``encode_result``, ``app/sandbox/outcome.py``):
``timeout`` (``Timeout``: wall clock, ``CpuTimeout``: CPU), ``output`` (``ResultTooLarge``: the trace's
size, which also sets ``truncated``; ``OutputLimitReached``: printed output; ``ServerBudget``: the
server's own budget for drawing, ``app/web/pages.py``), ``memory``; a run cut at the step limit has
``truncated`` and no error. Those become one ``Notice``; every other error (the snippet's
own exception, a rejected snippet, our failure) stays an ``ErrorView``.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.render import fmt
from app.schema import DeltaTrace, RunError

ERROR_TITLES = {
    "rejected": "The snippet was not run.",
    "runtime": "The snippet raised an error.",
    "internal": "Something went wrong on our side while running the snippet.",
    "untraced": "The snippet ran past where the tracer could follow it.",
}

# What each engine limit (``StepFields.capped``) leaves out, said with its figure.
CAP_PHRASES = {
    "tensors": "at most {:,} tensors are read per step",
    "nodes": "at most {:,} graph nodes are read per step",
    "names": "at most {:,} names are kept per step",
    "members": "at most {:,} container items are read per step",
    "items": "at most {:,} items are read from one container",
    "depth": "containers are read {:,} levels deep",
}


@dataclass(frozen=True)
class RunLimits:
    """The limits runs are held to (the server's settings), for the figures notices quote."""

    max_steps: int = 10_000
    wall_seconds: float = 5.0
    cpu_seconds: float = 5.0
    max_result_bytes: int = 8 * 1024 * 1024
    max_stdout_bytes: int = 64 * 1024
    memory_mib: int = 512


@dataclass(frozen=True)
class ErrorView:
    kind: str
    title: str
    type: str
    message: str
    line: int | None
    output: str = ""  # what the failing line printed before it failed (no step holds it)

    @property
    def where(self) -> str:
        return f"Line {self.line}" if self.line else ""

    @property
    def shows_type(self) -> bool:
        """The exception's type helps for the snippet's own errors, not for the sandbox's verdicts."""
        return self.kind in ("runtime", "rejected") and self.type not in ("Rejected", "SandboxError")

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.shows_type else self.message


@dataclass(frozen=True)
class Notice:
    """Why a run stopped before its end: ``cause`` is steps | time | size | memory | output, or
    server when the server could not show all of it (its budget for drawing ran out)."""

    cause: str
    text: str
    line: int | None  # the line it was running when it stopped, when known


def _steps(count: int) -> str:
    return f"{count:,} step" + ("" if count == 1 else "s")


def _after(count: int) -> str:
    return f"after {_steps(count)}" if count else "before its first step"


def _seconds(value: float) -> str:
    return f"{value:g} s"


def cut_notice(trace: DeltaTrace, limits: RunLimits) -> Notice | None:
    """The one limit that stopped this run, said with its figure; None when none did."""
    count, error = len(trace.steps), trace.error
    shown = " The steps so far are shown." if count else ""
    if error is None:
        if not trace.truncated:
            return None
        return Notice("steps", f"The snippet was stopped at the limit of {limits.max_steps:,} steps.{shown}",
                      None)
    line = error.line
    if error.kind == "timeout":
        limit = (f"{_seconds(limits.cpu_seconds)} CPU-time limit" if error.type == "CpuTimeout"
                 else f"{_seconds(limits.wall_seconds)} limit")
        return Notice("time", f"The snippet was stopped at the {limit} {_after(count)}.{shown}", line)
    if error.kind == "output" and error.type == "ResultTooLarge":
        size = fmt.nbytes(limits.max_result_bytes)
        return Notice("size", f"The trace reached the size limit of {size} {_after(count)} and was cut "
                      f"there.{shown}", line)
    if error.kind == "output" and error.type != "OutputLimitReached":
        # the server's own limits (its time budget for drawing, its answer size): its own sentence
        return Notice("server", error.message, None)
    if error.kind == "output":
        printed = fmt.nbytes(limits.max_stdout_bytes)
        return Notice("output", f"The snippet printed more than {printed}, the limit, and was stopped "
                      f"{_after(count)}.{shown}", line)
    if error.kind == "memory":
        return Notice("memory", f"The snippet ran out of memory (a run may use {limits.memory_mib:,} MiB) "
                      f"and was stopped {_after(count)}.{shown}", line)
    return None


def error_view(error: RunError | None) -> ErrorView | None:
    """The snippet's own error (or why it was not run); None for the limits ``cut_notice`` says."""
    if error is None or error.kind in ("timeout", "output", "memory"):
        return None
    title = ERROR_TITLES.get(error.kind, ERROR_TITLES["internal"])
    if error.kind == "rejected" and error.type == "SyntaxError":
        title = "Python could not read the snippet."
    elif error.type in ("Busy", "SandboxUnavailable"):  # refused before it ran: nothing went wrong
        title = ERROR_TITLES["rejected"]
    return ErrorView(error.kind, title, error.type, error.message, error.line, error.output)


def cap_notice(trace: DeltaTrace) -> Notice | None:
    """The engine's reading limits some step reached: what they leave out, from the first such step.

    The run itself went on; only what the view can show is cut, so this is said beside (never instead
    of) the one cause ``cut_notice`` names."""
    reached: dict[str, int] = {}
    first: int | None = None
    for index, step in enumerate(trace.steps):
        if step.capped:
            first = index if first is None else first
            reached.update(step.capped)
    if first is None:
        return None
    limits = "; ".join(CAP_PHRASES[cap].format(value) for cap, value in sorted(reached.items()))
    return Notice("capped", f"Not everything the snippet holds is shown from step {first + 1:,} on: "
                  f"{limits}. The run itself was not changed.", trace.steps[first].line)
