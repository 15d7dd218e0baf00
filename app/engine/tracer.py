"""Run a snippet under ``sys.settrace`` and take a snapshot after every executed line.

Like Python Tutor, each loop iteration and each line inside a function the snippet defines is its
own step. A ``line`` event announces the line *about to run*, so the snapshot for the line before it
is taken then; a ``return`` event closes the last line of a frame.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

from app.engine.frames import CALL_FRAME, hide_engine_frames

SNIPPET_FILENAME = "<snippet>"


class StepLimitReached(BaseException):
    """Raised into the snippet when the step budget is spent.

    A BaseException, so that the snippet's own ``except Exception`` does not swallow it.
    """


class EngineFailure(BaseException):
    """The tracer itself failed while taking a snapshot: an internal error, not the snippet's."""


class OutputLimitReached(BaseException):
    """Raised into the snippet when it printed more than the cap."""


class CappedOutput:
    """A write-only text stream with a byte cap, standing in for sys.stdout and sys.stderr."""

    def __init__(self, cap: int) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._cap = cap
        self._text_cache: str | None = ""

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self._cap - self._size
        if len(text) > room:
            self._parts.append(text[: max(room, 0)])
            self._size = self._cap
            self._text_cache = None
            raise OutputLimitReached
        self._parts.append(text)
        self._size += len(text)
        self._text_cache = None
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    @property
    def text(self) -> str:
        if self._text_cache is None:
            self._text_cache = "".join(self._parts)
            self._parts = [self._text_cache]
        return self._text_cache


class DiscardedOutput:
    """A text stream that drops what it is given."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


# Frames the user thinks of as part of one line: comprehensions, generator expressions, lambdas.
# (And the engine's own one-line calls: CALL_FRAME.)
INLINE_FRAMES = frozenset({"<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>", CALL_FRAME})


def _torch_code(module: str, name: str) -> Any:
    """The code object of a torch function the tracer watches (None if this torch has no such one)."""
    import importlib

    try:
        target = importlib.import_module(module)
        for part in name.split("."):
            target = getattr(target, part)
        return target.__code__
    except (ImportError, AttributeError):
        return None


# torch's one entry point into its C++ backward engine, for backward() and autograd.grad alike.
BACKWARD_ENTRY = _torch_code("torch.autograd.graph", "_engine_run_backward")
# torch functions that change tensors in ways no torch function call shows (Tensor.set_ inside), by the
# ``id`` of their code: the global trace function sees every Python call of the run, and hashing a
# code object (``code in a_set``) costs about 2 µs — as much as the rest of the check. The ids stay
# true: these are module-level functions, alive as long as torch is.
HIDDEN_WRITERS = frozenset(id(code) for code in (
    _torch_code("torch.utils", "swap_tensors"),
    _torch_code("torch.nn.utils.parametrize", "_maybe_set"),
    _torch_code("torch._tensor", "Tensor.__setstate__"),
    _torch_code("torch.autograd.graph", "increment_version"),  # a version bumped in C++, nothing written
) if code is not None)


# torch functions whose result gains facts after the snippet's code that made it has returned, by the
# ``id`` of their code: ``Function.apply`` attaches the graph (grad_fn, requires_grad, is_leaf) to
# what a custom Function's ``forward`` returned, in C++, with no version bump and no call the
# engine's mode sees — and that forward may have bound it to a name read at its steps. (Its
# arguments are noted too: see ``_result_trace``.)
RESULT_FACTS = frozenset(id(code) for code in (
    _torch_code("torch.autograd.function", "Function.apply"),
) if code is not None)


# Every torch function the global trace function looks for, asked first in one test.
WATCHED_CODE = frozenset({id(BACKWARD_ENTRY), *HIDDEN_WRITERS, *RESULT_FACTS})


class LineTracer:
    """Calls ``on_step(line, frame)`` after every executed snippet line, at most ``max_steps`` times.

    ``on_backward(roots)`` is called as each backward pass returns (with the tensors it started
    from), ``on_hidden_write()`` when torch code runs that changes tensors without a torch call, and
    ``on_result(value)`` with what a ``RESULT_FACTS`` function returned.
    """

    def __init__(self, on_step: Callable[[int, FrameType], None], max_steps: int,
                 on_backward: Callable[[FrameType, str], None] | None = None,
                 on_hidden_write: Callable[[], None] | None = None,
                 on_result: Callable[[Any], None] | None = None) -> None:
        self._on_step = on_step
        self._max_steps = max_steps
        # (frame of torch's backward entry point, "call" | "exception" | "return")
        self._on_backward = on_backward
        self._on_hidden_write = on_hidden_write
        self._on_result = on_result
        self.steps = 0
        self.truncated = False
        # Snippet frames entered or left so far (calls, generator resumptions, comprehensions and
        # lambdas; returns and yields): while it stays the same, no snippet code ran and no snippet
        # frame (a scope of names) ended — and nothing but snippet code rebinds its names.
        self.frame_events = 0
        # Per active snippet frame: [line being executed, whether an exception is propagating].
        self._stack: list[list[Any]] = []
        # Python switches tracing off when a trace function raises — ours does on purpose (the step
        # limit, a failure of its own) and by accident (no stack left): what it raised, and whether
        # the snippet then went on untraced (it caught that exception).
        self.raised: BaseException | None = None
        self.untraced = False
        self._callbacks = 0  # torch calls under way that called back into the snippet's code

    def _emit(self, line: int, frame: FrameType) -> None:
        if self.steps >= self._max_steps:
            self.truncated = True
            raise StepLimitReached
        self.steps += 1
        if self._callbacks and self._on_hidden_write is not None:
            self._on_hidden_write()  # inside a torch call (see global_trace)
        self._on_step(line, frame)

    def global_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        if code.co_filename != SNIPPET_FILENAME:
            if id(code) not in WATCHED_CODE:  # (nearly every call: torch's, the engine's own)
                # no line events for it: each would be a call into the trace machinery, which
                # finds no local trace function and returns (Python 3.11 makes one at every line
                # of every frame while a trace function is set)
                frame.f_trace_lines = False
                return None
            if code is BACKWARD_ENTRY and self._on_backward is not None:
                self._on_backward(frame, "call")
                return self._backward_trace
            if id(code) in HIDDEN_WRITERS and self._on_hidden_write is not None:
                self._on_hidden_write()
            elif id(code) in RESULT_FACTS and self._on_result is not None:
                frame.f_trace_lines = False  # its return is all that is asked of it
                return self._result_trace
            return None
        if code.co_name != CALL_FRAME:  # (the engine's own call frame runs and binds nothing of the
            self.frame_events += 1      # snippet's: what it calls back is a frame of its own)
        back = frame.f_back
        if back is not None and back.f_code.co_name == CALL_FRAME and back.f_trace is None \
                and self._on_hidden_write is not None:
            # Snippet code called back from inside a torch call (a saved_tensors_hooks pack
            # function, a tensor subclass's __torch_function__): the call writes and builds nodes
            # in C++ around it, with no call the engine's mode sees (it is off while its own call
            # runs) — a pack function's steps meet the call's node half built, with no saved
            # tensors yet. Every step until the call returns, and the step after it, reads whole:
            # (a local trace set on a running frame gets its return event).
            back.f_trace = self._callback_trace
            back.f_trace_lines = False
            self._callbacks += 1
        if code.co_name in INLINE_FRAMES:
            return None
        self._stack.append([None, False])
        return self._local_trace

    def _backward_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event in ("return", "exception") and self._on_backward is not None:
            self._on_backward(frame, event)  # "exception": the pass raised (then returns)
        return self._backward_trace

    def _callback_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return" and self._on_hidden_write is not None:
            self._callbacks -= 1
            self._on_hidden_write()
        return self._callback_trace

    def _result_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        if event == "return" and self._on_result is not None:
            # (arg: None when it raised.) Its tensor arguments too: a custom Function's
            # ``ctx.mark_dirty`` bumps their versions in C++ after forward, also when torch then
            # refuses it (a leaf that requires grad, written in place).
            self._on_result((arg, frame.f_locals.get("args")))
        return self._result_trace

    def count_step(self) -> bool:
        """Count a step taken outside a line event (a node of a backward pass); False past the limit,
        which then ends the run at the next line (never raised inside torch's backward engine)."""
        if self.steps >= self._max_steps:
            self.truncated = True
            return False
        self.steps += 1
        return True

    def _local_trace(self, frame: FrameType, event: str, arg: Any) -> Any:
        try:
            return self._trace_event(frame, event, arg)
        except BaseException as exc:
            self.raised = exc
            raise

    def _trace_event(self, frame: FrameType, event: str, arg: Any) -> Any:
        if self.truncated:
            raise StepLimitReached
        top = self._stack[-1]
        if event == "line":
            if top[0] is not None:
                self._emit(top[0], frame)
            top[0] = frame.f_lineno
            top[1] = False
        elif event == "exception":
            top[1] = True
            hide_engine_frames(arg[2])  # what the snippet may print of it: a plain run's frames
        elif event == "return":
            self._stack.pop()
            # A return during exception propagation means the line did not complete.
            if top[0] is not None and not top[1]:
                self._emit(top[0], frame)
            self.frame_events += 1  # after that step: its walk still saw this frame's names
        return self._local_trace

    def run(self, code: Any, namespace: dict[str, Any]) -> None:
        previous = sys.gettrace()
        sys.settrace(self.global_trace)
        try:
            exec(code, namespace)  # noqa: S102 - running the snippet is the point
        finally:
            # Python turned tracing off after a trace function raised, and the snippet ran on.
            self.untraced = self.raised is not None and sys.gettrace() is None
            sys.settrace(previous)


def snippet_scopes(frame: FrameType | None, module_namespace: dict[str, Any]) -> list[tuple[str, dict]]:
    """The module namespace first, then ``f:``-prefixed locals of each active snippet function."""
    functions: list[tuple[str, dict]] = []
    while frame is not None:
        code = frame.f_code
        if (
            code.co_filename == SNIPPET_FILENAME
            and code.co_name != "<module>"
            and code.co_name not in INLINE_FRAMES
        ):
            functions.append((f"{code.co_name}:", frame.f_locals))
        frame = frame.f_back
    return [("", module_namespace), *reversed(functions)]


def error_line(error: BaseException) -> int | None:
    """The snippet line that raised: the deepest traceback entry inside the snippet."""
    if isinstance(error, SyntaxError) and error.filename == SNIPPET_FILENAME:
        return error.lineno
    line = None
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == SNIPPET_FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line
