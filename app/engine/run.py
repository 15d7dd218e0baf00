"""The trace engine's entry point: code in, a ``DeltaTrace``-shaped dict out (``trace_snippet``: v1).

It knows nothing about the web layer or the sandbox; those call ``trace_snippet``.
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import math
import random
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name learners know
from torch import nn
from torch._C import _get_tracing_state, _set_tracing_state

from app.engine import cuda_on_cpu
from app.engine.backward import (
    BackwardWatch,
    NodeRan,
    freed_message,
    pass_arguments,
    plain_backward_lines,
    snippet_frame_above,
)
from app.engine.calls import counted_as_plain, modes_unseen
from app.engine.hooks import HookWatch, registers_hooks
from app.engine.jit_names import jit_names_as_plain
from app.engine.snapshot import SnapshotTaker
from app.engine.stacks import stacks_as_plain
from app.engine.swaps import swaps_allowed
from app.engine.tracer import (
    SNIPPET_FILENAME,
    CappedOutput,
    DiscardedOutput,
    EngineFailure,
    LineTracer,
    OutputLimitReached,
    StepLimitReached,
    error_line,
    snippet_scopes,
)
from app.engine.watch import WHOLE_SNAPSHOT, Touches
from app.engine.workers import workers_in_process
from app.run_errors import Param, error_dict, said
from app.schema import DeltaTrace
from app.trace.delta import expand

SEED = 0
# gc's third threshold while a snippet runs: the number of younger collections before a full one,
# here more than any run reaches (app.engine.run.trace_delta)
NO_FULL_COLLECTION = 1_000_000
DISCARD = DiscardedOutput()
# The run in progress (its steps so far): what the sandbox answers with when a snippet will not stop.
LIVE: dict[str, Any] = {}


@dataclass(frozen=True)
class EngineLimits:
    # Steps recorded. A run that makes more goes on to its end unrecorded (the sandbox's time and
    # memory limits hold it), and its last step is where it ended, with all it printed: a plain run
    # prints everything, and a tutorial's loop prints its last lines last (``_Unrecorded``).
    max_steps: int = 10_000
    max_stdout: int = 64 * 1024
    # Read everything at every step instead of what may have changed: the reference the tests hold
    # the incremental snapshots to (same answers, slower).
    full_snapshots: bool = False
    # Code written for a GPU runs here: what it puts on cuda is made on the CPU and shown as cuda:0
    # (app.engine.cuda_on_cpu), and the trace says the run was simulated (its ``cuda_on_cpu``).
    cuda_on_cpu: bool = False
    # At most this many steps run unrecorded past ``max_steps`` before the run is stopped there (its
    # last step then the state at the stop): for a caller with no clock to end an endless loop (the
    # engine's own tests). None: the run goes on to its end.
    max_unrecorded: int | None = None


class _Unrecorded:
    """The steps past the recorded ones: counted, not read. The last step of a run past its step
    limit stands for them, read whole when the run ends (the end of the run, all it printed), so a run
    of any length has at most ``max_steps`` steps; a run that ends at its ``max_steps``-th step is
    whole, as any shorter one.

    Once a second step is past the limit (the run is truncated for good), tracing is turned off: the
    rest runs at the speed of the engine's modes alone (which keep its warnings and paths a plain
    run's), about twice as fast as traced with no step taken (the tutorial's 2,000-iteration RMSprop
    loop: 1.8 -> 1.1 s of CPU, a plain run 0.19 s). Its end's line is then the line the module's
    frame ended at (what the tracer would have said at its return)."""

    def __init__(self, limits: EngineLimits) -> None:
        self.recorded = max(limits.max_steps - 1, 0)  # the one after: the run's end
        self.cap = limits.max_unrecorded
        self.count = 0  # steps past the recorded ones (lines and backward nodes) while traced
        self.line: int | None = None  # the line of the last one
        self.module: FrameType | None = None  # the snippet's module frame, once untraced

    def past(self, recorded: int) -> bool:
        return recorded >= self.recorded

    def note(self, line: int | None = None) -> bool:
        """One more unrecorded step (a line's, when ``line``); True when the cap is passed: the run
        stops here, this step its last."""
        self.count += 1
        if line is not None:
            self.line = line
        return self.cap is not None and self.count > self.cap

    def untrace(self, frame: FrameType, passes: list[Any]) -> None:
        """Called at a line past the limit: go on untraced when no count is needed any more (no cap,
        and more than one step left out) and no watched backward pass is running (its end must be
        seen: its hooks removed, the mode it pushed popped)."""
        if self.cap is not None or self.count < 2 or any(watched is not None for watched in passes):
            return
        while frame.f_back is not None and frame.f_back.f_code.co_filename == SNIPPET_FILENAME:
            frame = frame.f_back
        self.module = frame
        sys.settrace(None)

    def end_line(self) -> int | None:
        """The line of the run's last step, once it ended."""
        if self.module is not None:
            line = self.module.f_lineno  # a finished frame's: the line it returned at
            self.module = None
            return line if line is not None else self.line
        return self.line

    @property
    def truncated(self) -> bool:
        """Steps were left out: more than the one the last step stands for."""
        return self.count > 1


def prelude(builtins_namespace: Any = builtins) -> dict[str, Any]:
    """The names a snippet starts with."""
    return {
        "__name__": "__main__",
        "__builtins__": builtins_namespace,
        "torch": torch,
        "nn": nn,
        "F": F,
        "math": math,
    }


def _error(kind: str, error: BaseException, line: int | None, message: str | None = None, *,
           code: str | None = None, params: dict[str, Param] | None = None) -> dict:
    """The error in Python's (or torch's) own words; or, with ``code``, in ours (``app.run_errors``:
    the page translates it)."""
    if code is not None:
        return error_dict(kind, type(error).__name__, code, params, line)
    return {
        "kind": kind,
        "type": type(error).__name__,
        "message": (message if message is not None else str(error))[:4000],
        "line": line,
    }


def trace_delta(
    source: str, limits: EngineLimits | None = None, builtins_namespace: Any = builtins,
    after_step: Callable[[list[dict[str, Any]]], None] | None = None,
    namespace: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run ``source`` and return the trace in the delta format (shaped like ``app.schema.DeltaTrace``):
    each step holds what its line changed. ``after_step(steps)`` is called after each step is added
    (the sandbox child writes them out as the run goes on); a step is never changed once added.
    ``namespace``: the caller's dict to run in (a notebook cell's variables, ``autograd_explorer``):
    the prelude fills only the names it lacks, and it is left as the run leaves it, not emptied."""
    limits = limits or EngineLimits()
    try:
        # dont_inherit: the snippet is compiled as Python compiles a script, without this module's
        # ``from __future__ import annotations`` (its annotations would be strings, and a string
        # annotation is code that typing.get_type_hints would run: issue 25).
        code = compile(source, SNIPPET_FILENAME, "exec", dont_inherit=True)
    except SyntaxError as error:
        return _result([], False, _error("rejected", error, error.lineno, f"{error.msg}"))
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, absurd nesting
        return _result([], False, _error("rejected", error, None))

    freed_message()  # asked of torch before the run: its own backward pass must not be traced
    # Same seed every run, so a permalink reproduces the same numbers (on any replica: numpy's global
    # generator too, which each process seeds from the OS when it imports numpy).
    _seed_torch()
    random.seed(SEED)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(SEED)

    output = CappedOutput(limits.max_stdout)
    # The snippet's hooks on graph nodes are seen only as they are registered (app.engine.hooks).
    hook_watch = HookWatch(lambda: setattr(touches, "whole", True), active=registers_hooks(source))
    taker = SnapshotTaker(full=limits.full_snapshots)
    touches = Touches()
    # the lines after which a step is read whole (searched once, not at each of their steps)
    whole_lines = {number for number, text in enumerate(source.split("\n"), 1) if WHOLE_SNAPSHOT.search(text)}
    plain_lines = plain_backward_lines(source)  # ``loss.backward()``: binds no name before its pass
    steps: list[dict[str, Any]] = []
    LIVE["steps"] = steps
    unrecorded = _Unrecorded(limits)
    start = prelude(builtins_namespace)
    if namespace is not None:
        namespace.update({name: value for name, value in start.items() if name not in namespace})
    scope: dict[str, Any] = {"namespace": start if namespace is None else namespace, "printed": 0,
                             "walked_at": None, "passed": False}

    def on_step(line: int, frame: FrameType) -> None:
        if unrecorded.past(len(steps)):
            if not unrecorded.note(line):
                unrecorded.untrace(frame, watches)
                return
            tracer.truncated = True  # stopped (max_unrecorded): this step is the last; raised again at
            take_step(line, frame)  # each line the snippet runs on, if it catches this
            raise StepLimitReached
        take_step(line, frame)

    def take_step(line: int, frame: FrameType | None) -> None:
        # Reading a frame's locals first lets go of what the frame no longer holds (``del t`` in a
        # function): a __del__ that runs now prints into the snippet's output, as it would unobserved.
        scopes = snippet_scopes(frame, scope["namespace"])
        printed = output.text[scope["printed"]:]
        scope["printed"] += len(printed)
        if line in whole_lines:
            touches.whole = True
        streams = sys.stdout, sys.stderr
        # Reading facts can run snippet code the plain run would not run then (a module's overridden
        # methods, a saved-tensor hook): whatever it prints is not the snippet's output.
        sys.stdout = sys.stderr = DISCARD  # type: ignore[assignment]
        # A line inside a function torch.jit.trace runs: the step's reads are not the snippet's ops,
        # so the tracer must not record them (they would join the traced graph, warn, and give
        # sizes as tensors), as it does not while the snippet runs unobserved.
        jit_tracing = _get_tracing_state()
        if jit_tracing is not None:
            _set_tracing_state(None)
        try:
            with hook_watch.quiet():
                # (after ``loss.backward()`` whose pass ran no snippet code: no name changed either)
                still = line in plain_lines and scope["passed"] and names_still()
                scope["passed"] = False
                steps.append(taker.take(line, printed, scopes, touches, in_pass=bool(watches),
                                        names_still=still))
                if after_step is not None:
                    after_step(steps)
            scope["walked_at"] = tracer.frame_events
        except (RecursionError, MemoryError):
            raise  # the snippet's own doing (it recursed deep, or filled memory): report it as such
        except Exception as exc:
            raise EngineFailure(f"{type(exc).__name__}: {exc}") from exc
        finally:
            if jit_tracing is not None:
                _set_tracing_state(jit_tracing)
            touches.clear()
            sys.stdout, sys.stderr = streams

    def names_still() -> bool:
        # Between two nodes of one backward pass only torch's C++ and the snippet's hooks run. Where
        # no hook can be registered (app.engine.hooks) and no snippet frame was entered or left since
        # the last walk, no name can have changed: the walk is skipped (a fifth of a node step's
        # reading on Adam). The first node of a pass walks unless the line that called backward is
        # one that binds no name before the call (``loss.backward()``: backward.plain_backward_lines).
        return (scope["walked_at"] == tracer.frame_events and not hook_watch.active
                and not taker.walker.capped)

    def on_node(ran: NodeRan) -> bool:
        # One node of a backward pass just ran: a step for it, counted like any other (True).
        if ran.frame is None or not tracer.count_step():
            return False
        if unrecorded.past(len(steps)):
            unrecorded.note()  # (a cap passed stops the run at its next line: never inside backward)
            return False
        printed = output.text[scope["printed"]:]
        scope["printed"] += len(printed)
        streams = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = DISCARD  # type: ignore[assignment]
        # (tracing is off here: the node's hook turned it off for all of the engine's work,
        # app.engine.backward.BackwardWatch)
        try:
            cuda_on_cpu.node_ran(ran.node, ran.received, ran.sent)  # its gradients' device, if simulating
            scopes = snippet_scopes(ran.frame, scope["namespace"])
            with hook_watch.quiet():
                steps.append(taker.take(ran.frame.f_lineno, printed, scopes, touches, ran,
                                        names_still=names_still()))
                if after_step is not None:
                    after_step(steps)
            scope["walked_at"] = tracer.frame_events
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:
            raise EngineFailure(f"{type(exc).__name__}: {exc}") from exc
        finally:
            touches.clear()
            sys.stdout, sys.stderr = streams
        return True

    # (None: a pass started past the step limit, not watched)
    watches: list[tuple[BackwardWatch, bool] | None] = []

    def on_backward(frame: FrameType, event: str) -> None:
        # torch's backward entry point starts (hook its graph) or returns (unhook; mark for the line).
        if event == "call" and unrecorded.past(len(steps)):
            watches.append(None)  # its nodes' steps are not recorded: nothing to hook or mark
            return
        if watches and watches[-1] is None:
            if event == "return":
                watches.pop()
            return
        if event == "call":
            caller = snippet_frame_above(frame)
            if caller is None or caller.f_lineno not in plain_lines:
                scope["walked_at"] = None  # the pass's first node walks (see names_still)
            watch = BackwardWatch(on_node)
            watches.append((watch, touches.watch_again()))  # the snippet's hooks run in there
            taker.storage_ids.pass_depth = len(watches)
            watch.start(frame)
            touches.tensors.update(map(id, pass_arguments(frame).inputs))  # read at the first node
            return
        if event == "exception":
            if watches:
                watches[-1][0].stepped_every_node = False  # type: ignore[index]
            return
        # A retained input's .grad is set as its gradient is captured, after the last node's step
        # (by torch.autograd.grad too, out of place): the line's step reads the inputs again.
        scope["passed"] = True  # (a backward pass returned: see take_step)
        called = pass_arguments(frame)
        touches.tensors.update(map(id, called.inputs))
        stepped = False
        if watches:
            if not called.keep_graph:  # (kept, what its saved outputs hold lives on: jacobian's passes)
                taker.storage_ids.end_pass(len(watches))
            taker.storage_ids.pass_depth = len(watches) - 1
            watch, pushed = watches.pop()  # type: ignore[misc]
            watch.stop()
            if pushed:
                touches.unwatch()
            stepped = watch.stepped_every_node and watch.stepped > 0
        if stepped:
            # Each node's step read what that node changed (the node, the tensors it made, its leaf,
            # their grads), and after the last one torch only frees what that node saved, which its
            # step shows freed already: the line's step reads what ran since, not the pass again.
            # (About a tenth of Adam's reading: the pass's parameters and grads, read twice.)
            return
        roots = called.roots
        with torch._C.DisableTorchFunction():
            for root in roots if isinstance(roots, list | tuple) else (roots,):
                nodes, leaves = taker.backward_marks(root)
                touches.backward_nodes |= nodes
                touches.backward_leaves |= leaves

    # (the tracer counts every step; which are recorded is ``unrecorded``'s to say)
    tracer = LineTracer(on_step, sys.maxsize, on_backward=on_backward,
                        on_hidden_write=lambda: setattr(touches, "whole", True),
                        on_result=touches.note_result)

    def read_whole() -> None:  # a call that changed tensors behind torch's back (app.engine.swaps)
        touches.whole = True

    error: dict[str, Any] | None = None
    saved_streams = sys.stdout, sys.stderr
    # Objects that exist before the run (torch's own, hundreds of thousands) are not garbage; freezing
    # them keeps full collections from re-scanning them while the snippet runs (about a third of the
    # time of a 500-step loop).
    already_frozen = gc.get_freeze_count() > 0
    gc.freeze()
    # Nor does a full collection start while the snippet runs: it would scan what the run made so
    # far, mostly the engine's facts of R, alive until the run ends (a kept ReLU loop of 1,000
    # steps paid ~20 ms, 7 % of its run, for its one). Young cycles are still collected as usual,
    # and the snippet's gc.collect() collects everything.
    thresholds = gc.get_threshold()
    gc.set_threshold(thresholds[0], thresholds[1], NO_FULL_COLLECTION)
    sys.stdout = sys.stderr = output  # type: ignore[assignment]
    try:
        # A fresh warnings state (entering it resets what "shown once" remembers), with the filters
        # of the interpreter, as in a fresh one.
        with warnings.catch_warnings(), counted_as_plain(), modes_unseen(), touches, hook_watch, \
                _cuda(limits, taker), workers_in_process(), swaps_allowed(read_whole), stacks_as_plain(), \
                jit_names_as_plain():
            # Shown as a plain run shows them, on stderr (the output), even where the host collects
            # them instead (pytest's capture, a caller's catch_warnings(record=True)).
            warnings.showwarning = _show_warning
            # what torch warns about while we read facts is ours, not the snippet's
            warnings.filterwarnings("ignore", module=r"app\.engine\.")
            tracer.run(code, scope["namespace"])
            end = unrecorded.end_line() if unrecorded.count else None
            if end is not None:
                # The run ended past its step limit: its last step is its end, read whole, with
                # everything printed since the last recorded one (the module's names only, as at
                # the step of its last line).
                touches.whole = True
                take_step(end, None)
    except StepLimitReached:
        pass
    except EngineFailure as exc:
        error = _error("internal", exc, error_line(exc), code="internal.tracer_failed",
                       params={"detail": str(exc)})
    except OutputLimitReached as exc:
        error = _error("output", exc, error_line(exc), code="output.printed_too_much",
                       params={"kib": limits.max_stdout // 1024})
    except RecursionError as exc:
        error = _error("runtime", exc, error_line(exc))
    except MemoryError as exc:
        error = _error("memory", exc, error_line(exc), code="memory.engine")
    except BaseException as exc:  # the snippet's own error is data, not a crash
        error = said(exc, error_line(exc), limits.cuda_on_cpu) or _error("runtime", exc, error_line(exc))
    finally:
        # Free the snippet's objects while its output is still captured: a __del__ that prints must
        # not write into the real stdout (the worker's result channel).
        _release(scope, keep=namespace is not None)
        sys.stdout, sys.stderr = saved_streams
        gc.set_threshold(*thresholds)
        if not already_frozen:
            gc.unfreeze()
    LIVE.clear()
    error = error or _untraced(tracer)
    if error is not None:
        # what the failing line printed before it failed: no step holds it
        error["output"] = output.text[scope["printed"]:][-(1 << 17):]
    result = _result(steps, tracer.truncated or unrecorded.truncated, error)
    if limits.cuda_on_cpu:
        result["cuda_on_cpu"] = True
    return result


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """Python's own way of showing a warning: its standard text, written to ``sys.stderr``."""
    stream = file if file is not None else sys.stderr
    with contextlib.suppress(OSError):
        stream.write(warnings.formatwarning(message, category, filename, lineno, line))


def _untraced(tracer: LineTracer) -> dict[str, Any] | None:
    """The run ended without an error, but not traced to its end: say so, and why."""
    if not tracer.untraced:
        return None
    raised = tracer.raised
    if isinstance(raised, StepLimitReached):
        return None  # the step limit: truncated says it (and the snippet may well have caught it)
    if isinstance(raised, EngineFailure):
        return _error("internal", raised, None, code="internal.tracer_failed", params={"detail": str(raised)})
    error_type = type(raised).__name__ if raised else "Untraced"
    if isinstance(raised, RecursionError):
        return error_dict("untraced", error_type, "untraced.recursion")
    return error_dict("untraced", error_type, "untraced.caught", {"type": type(raised).__name__})


def _cuda(limits: EngineLimits, taker: SnapshotTaker) -> contextlib.AbstractContextManager:
    """cuda mapped to the CPU for the run, when asked; its torch.cuda.memory_allocated() is the model's
    (app.trace.gpu) of the storages the last step showed on the simulated device."""
    if not limits.cuda_on_cpu:
        return contextlib.nullcontext()
    return cuda_on_cpu.simulation(lambda: cuda_on_cpu.allocated_bytes(taker.tensors, taker.storages))


def _result(steps: list[dict[str, Any]], truncated: bool, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"format": "delta", "ok": error is None, "truncated": truncated, "error": error, "steps": steps}


def _seed_torch() -> None:
    """Seed torch's generators. Without a GPU the CPU generator is the only one: torch.manual_seed
    would also queue a lazy CUDA seeding that formats a stack trace on every call (0.2-0.4 ms, a sixth
    to a third of a small run) for a device this process does not have."""
    if torch.cuda.is_available():
        torch.manual_seed(SEED)
    else:
        torch.default_generator.manual_seed(SEED)


def trace_snippet(
    source: str, limits: EngineLimits | None = None, builtins_namespace: Any = builtins
) -> dict[str, Any]:
    """Run ``source`` and return the trace as plain data shaped like ``app.schema.RunResult`` (v1:
    every step whole): ``expand`` of the delta trace."""
    delta = DeltaTrace.model_validate(trace_delta(source, limits, builtins_namespace))
    return expand(delta).model_dump()


def _release(scope: dict[str, Any], keep: bool = False) -> None:
    namespace = scope.pop("namespace")
    if keep:  # the caller's: its variables outlive the run (the caller lets go of them)
        return
    # Clearing also breaks the cycle through functions' __globals__. A snippet's __del__ may raise
    # anything here; the run is over, so it is ignored.
    with contextlib.suppress(BaseException):
        namespace.clear()
