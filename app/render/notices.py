"""What the page says about how a run ended: the snippet's own error, or the one limit that cut it.

A run stops early for exactly one reason, and the page says that one, with its figure: the time
limit ("stopped at the 5 s limit after 2,310 steps"), the size of its trace, its memory, or how
much it printed. The sandbox reports these as error kinds (``app/sandbox/child.py::_explain`` and
``encode_result``, ``app/sandbox/outcome.py``): ``timeout`` (``Timeout``: wall clock,
``CpuTimeout``: CPU), ``output`` (``ResultTooLarge``: the trace's size, which also sets
``truncated``; ``OutputLimitReached``: printed output; ``ServerBudget``: the server's own budget for
drawing, ``app/web/pages.py``), ``memory``. Those become one ``Notice``; every other error (the
snippet's own exception, a rejected snippet, our failure) stays an ``ErrorView``. A run past the
step limit is not stopped: it runs on to its end unrecorded (``truncated``, its last step that end)
and the notice says which steps were not recorded — beside the red box when the snippet's own
error ended it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.i18n import N_, error_text, ngettext, number
from app.i18n import gettext as _
from app.render import fmt
from app.schema import DeltaTrace, RunError

# Marked here, translated when said (the locale is the request's, known only then).
ERROR_TITLES = {
    "rejected": N_("The snippet was not run."),
    "runtime": N_("The snippet raised an error."),
    "internal": N_("Something went wrong on our side while running the snippet."),
    "untraced": N_("The snippet ran past where the tracer could follow it."),
}

# What each engine limit (``StepFields.capped``) leaves out, said with its figure.
CAP_PHRASES = {
    "tensors": N_("at most {n} tensors are read per step"),
    "nodes": N_("at most {n} graph nodes are read per step"),
    "names": N_("at most {n} names are kept per step"),
    "members": N_("at most {n} container items are read per step"),
    "items": N_("at most {n} items are read from one container"),
    "depth": N_("containers are read {n} levels deep"),
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
        return _("Line {line}").format(line=self.line) if self.line else ""

    @property
    def shows_type(self) -> bool:
        """The exception's type helps for the snippet's own errors, not for the sandbox's verdicts."""
        return self.kind in ("runtime", "rejected") and self.type not in ("Rejected", "SandboxError")

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.shows_type else self.message

    @property
    def note(self) -> str:
        """What the editor says under the failing line: the error is said once, in the run's box."""
        if self.shows_type:
            return _("{type} here: its message is in the red box with the run").format(type=self.type)
        return _("The run stopped here: why is in the red box with the run")


@dataclass(frozen=True)
class Notice:
    """Why a run stopped before its end: ``cause`` is steps | time | size | memory | output, stopped
    (the reader's Stop), or server when the server could not show all of it (its budget for drawing
    ran out)."""

    cause: str
    text: str
    line: int | None  # the line it was running when it stopped, when known
    # what the run printed after its last step, which no step holds (a run cut by the clock past the
    # step limit printed on unrecorded; a line stopped midway printed before it stopped)
    output: str = ""


def _steps(count: int) -> str:
    return ngettext("{n} step", "{n} steps", count).format(n=number(count))


def _after(count: int) -> str:
    return _("after {steps}").format(steps=_steps(count)) if count else _("before its first step")


def _seconds(value: float) -> str:
    return _("{seconds} s").format(seconds=f"{value:g}")


def cut_notice(trace: DeltaTrace, limits: RunLimits) -> Notice | None:
    """The one limit that stopped this run, said with its figure; None when none did."""
    count, error = len(trace.steps), trace.error
    if error is None:
        if not trace.truncated:
            return None
        # Past the step limit the run goes on to its end unrecorded; its last step is that end
        # (app.engine.run._Unrecorded).
        return Notice("steps", _("The run went past the limit of {n} steps: it ran on to its end, but the "
                                 "steps after step {recorded} were not recorded. The last step shows where "
                                 "it ended, with all of its output.").format(
            n=number(limits.max_steps), recorded=number(max(count - 1, 0))), None)
    line = error.line
    if error.kind == "runtime" and trace.truncated:
        # The snippet's own error, past the step limit: the red box says the error, this says what
        # is missing before it (what ran unrecorded printed is in the box's output).
        return Notice("steps", _("The run went past the limit of {n} steps: it ran on until the error, but "
                                 "the steps after step {recorded} were not recorded. Their output is shown "
                                 "with the error.").format(
            n=number(limits.max_steps), recorded=number(count)), line)
    notice = _limit_notice(error, count, limits)
    return dataclasses.replace(notice, output=error.output or "") if notice is not None else None


def _limit_notice(error: RunError, count: int, limits: RunLimits) -> Notice | None:
    """The limit ``error`` says the run met, in the reader's words."""
    line = error.line
    shown = _(" The steps so far are shown.") if count else ""
    after = _after(count)
    if error.kind == "timeout" and error.type == "Stopped":  # the reader's Stop (app.web.stops)
        return Notice("stopped", _("You stopped the run {after}.{shown}").format(after=after, shown=shown),
                      line)
    if error.kind == "timeout":
        limit = (_("{seconds} CPU-time limit").format(seconds=_seconds(limits.cpu_seconds))
                 if error.type == "CpuTimeout"
                 else _("{seconds} limit").format(seconds=_seconds(limits.wall_seconds)))
        return Notice("time", _("The snippet was stopped at the {limit} {after}.{shown}").format(
            limit=limit, after=after, shown=shown), line)
    if error.kind == "output" and error.type == "ResultTooLarge":
        size = fmt.nbytes(limits.max_result_bytes)
        return Notice("size", _("The trace reached the size limit of {size} {after} and was cut "
                                "there.{shown}").format(size=size, after=after, shown=shown), line)
    if error.kind == "output" and error.type != "OutputLimitReached":
        # the server's own limits (its time budget for drawing, its answer size): its own sentence,
        # said again in the reader's language from its code when our code wrote it
        return Notice("server", error_text(error), None)
    if error.kind == "output":
        printed = fmt.nbytes(limits.max_stdout_bytes)
        return Notice("output", _("The snippet printed more than {size}, the limit, and was stopped "
                                  "{after}.{shown}").format(size=printed, after=after, shown=shown), line)
    if error.kind == "memory":
        return Notice("memory", _("The snippet ran out of memory (a run may use {mib} MiB) and was stopped "
                                  "{after}.{shown}").format(mib=number(limits.memory_mib), after=after,
                                                            shown=shown), line)
    return None


def error_view(error: RunError | None) -> ErrorView | None:
    """The snippet's own error (or why it was not run); None for the limits ``cut_notice`` says."""
    if error is None or error.kind in ("timeout", "output", "memory"):
        return None
    kind = error.kind if error.kind in ERROR_TITLES else "internal"
    if error.type in ("Busy", "SandboxUnavailable"):  # refused before it ran: nothing went wrong
        kind = "rejected"
    title = _(ERROR_TITLES[kind])
    if error.kind == "rejected" and error.type == "SyntaxError":
        title = _("Python could not read the snippet.")
    # ours (a refusal, a limit) in the reader's language from its code; torch's as torch wrote it
    return ErrorView(error.kind, title, error.type, error_text(error), error.line, error.output)


def cuda_notice(trace: DeltaTrace) -> Notice | None:
    """A run whose cuda ran on the CPU (``cuda_on_cpu``) says so beside its views, every time."""
    if not trace.cuda_on_cpu:
        return None
    return Notice("cuda", _("cuda ran on the CPU here: what the code put on cuda is shown as cuda:0 but "
                            "lives in this machine's memory (simulated). torch.cuda.memory_allocated() "
                            "answers a model: the storages on cuda:0 at the step before, in blocks as "
                            "PyTorch's caching allocator rounds them."), None)


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
    limits = _("; ").join(_(CAP_PHRASES[cap]).format(n=number(value))
                          for cap, value in sorted(reached.items()))
    text = _("Not everything the snippet holds is shown from step {step} on: {limits}. The run itself was "
             "not changed.").format(step=number(first + 1), limits=limits)
    return Notice("capped", text, trace.steps[first].line)
