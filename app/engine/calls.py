"""The engine's own frames and modes around the snippet's torch calls, kept out of what the snippet
prints and out of the paths torch picks.

The engine's ``TorchFunctionMode`` (``app.engine.watch.Touches``) sees each torch call and makes it
itself, so frames of its own stand between the code that called torch and the torch code that runs.
Two things count those frames: a warning torch raises from C++ names the Python frame that made the
call, and a Python warning counts ``stacklevel`` frames up from the code that warns (``F.softmax``
without ``dim`` warns 3 up, naming the snippet's line; ``nn.Softmax()`` 5 up, naming
``module.py:1778``). So the call runs in a function whose one line is the caller's (its file name
and line number, and the caller's globals, for the warnings registry), and while the snippet runs,
``warnings.warn`` counts frames as Python's own does except that it steps from such a call straight
to its caller's caller: the frames between (the mode's, torch's ``handle_torch_function``, the
Python function's first entry) are not the snippet's.

torch also asks ``torch.overrides.has_torch_function`` to pick a path, not only to dispatch: in eval
mode without grad, ``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` take a fused fast
path unless it says yes — and any mode on the stack makes it say yes, so under the engine they took
the slow path, whose results differ in the last bits. While the snippet runs it answers as if the
engine's modes were not there (``modes_unseen``).
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from collections.abc import Iterator
from types import FrameType
from typing import Any

import torch

from app.engine.tracer import CALL_FRAME  # (the call's frame: one the tracer skips)

# One function per caller's file and line, called in the caller's globals (kept for the last globals
# seen there: a run's namespace is a new dict, torch's modules are not).
CALLS: dict[tuple[str, int], Any] = {}
# The call's code: a function of the call, its arguments and the caller it stands for (``__c``,
# read by ``_back`` and app.engine.stacks), whose body is one line — given the caller's file and
# line by ``call_at``. (A function, not a one-line module run by ``exec``: no dict of locals to
# build and no exec to go through, at every torch call.)
# ``__t``: the tracer's trace function, which the engine's mode turned off for its own bookkeeping
# (app.engine.watch): set again here, in the call's frame, not before it (a call of the trace
# function less at every torch call: the frame starts untraced), on the call's one line.
_CALL_CODE = next(const for const in compile(
    "def _(__f, __a, __k, __c, __t=None, __s=None):\n    __t is None or __s(__t); return __f(*__a, **__k)\n",
    "<call>", "exec").co_consts if isinstance(const, types.CodeType))


def call_as_caller(caller: FrameType, func: Any, args: Any, kwargs: Any) -> Any:
    """``func`` called from a one-line function at ``caller``'s file and line (see the module's
    docstring). The engine's mode (``app.engine.watch.Touches``) does the same inline — its caller
    is the frame above it, or above a Python function's ``handle_torch_function`` and the
    function's first entry —: while the snippet runs, every Python call, the engine's too, is a
    call of the tracer's global trace function (a tenth of Adam's run went to the mode's frames)."""
    call = CALLS.get((caller.f_code.co_filename, caller.f_lineno))
    if call is None or call.__globals__ is not caller.f_globals:
        call = call_at(caller)
    return call(func, args, kwargs, caller)


def call_at(caller: FrameType) -> Any:
    """The function that makes a call from ``caller``'s file and line, in its globals
    (``call(func, args, kwargs, caller)``)."""
    key = (caller.f_code.co_filename, caller.f_lineno)
    # (the body's line is the one after the first: the function's first line is the caller's less one)
    code = _CALL_CODE.replace(co_filename=key[0], co_firstlineno=max(key[1], 1) - 1, co_name=CALL_FRAME,
                              co_qualname=CALL_FRAME)
    call = CALLS[key] = types.FunctionType(code, caller.f_globals, None, (None, sys.settrace))
    return call


def _back(frame: FrameType) -> FrameType | None:
    """The frame a plain run has above ``frame``: above one of our calls, its caller's caller."""
    if frame.f_code.co_name == CALL_FRAME:
        stood_for = frame.f_locals.get("__c")
        if stood_for is not None:
            return stood_for.f_back
    return frame.f_back


def _is_internal(frame: FrameType) -> bool:
    filename = frame.f_code.co_filename  # as Python's warnings module tells importlib's frames
    return "importlib" in filename and "_bootstrap" in filename


def warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
    """Python 3.11's ``warnings.warn``, frame for frame, with ``_back`` for ``f_back``."""
    if isinstance(message, Warning):
        category = message.__class__
    if category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    frame: FrameType | None = sys._getframe(1)
    if stacklevel <= 1 or _is_internal(frame):
        for _ in range(stacklevel - 1):
            frame = _back(frame) if frame is not None else None
    else:
        for _ in range(stacklevel - 1):
            frame = _back(frame) if frame is not None else None
            while frame is not None and _is_internal(frame):
                frame = _back(frame)
    if frame is None:
        globals_, filename, lineno = sys.__dict__, "sys", 1
    else:
        globals_, filename, lineno = frame.f_globals, frame.f_code.co_filename, frame.f_lineno
    module = globals_.get("__name__", "<string>")
    registry = globals_.setdefault("__warningregistry__", {})
    warnings.warn_explicit(message, category, filename, lineno, module, registry, globals_, source)


@contextlib.contextmanager
def counted_as_plain() -> Iterator[None]:
    """``warnings.warn`` is ``warn`` while the block runs."""
    original = warnings.warn
    warnings.warn = warn  # type: ignore[assignment]
    try:
        yield
    finally:
        warnings.warn = original  # type: ignore[assignment]


_has_torch_function = torch.overrides.has_torch_function


def _ours(mode: Any) -> bool:
    return type(mode).__module__.startswith("app.engine.")


def has_torch_function_unseen(args: Any) -> bool:
    """``torch.overrides.has_torch_function``, with the engine's own modes off the stack."""
    if not _has_torch_function(args):
        return False
    stack = torch.overrides._get_current_function_mode_stack()
    if not stack or not all(_ours(mode) for mode in stack):
        return True  # a tensor subclass that overrides, or a mode of the snippet's own
    popped = [torch._C._pop_torch_function_stack() for _ in stack]
    try:
        return _has_torch_function(args)
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def modes_unseen() -> Iterator[None]:
    """``torch.overrides.has_torch_function`` is ``has_torch_function_unseen`` while the block runs
    (torch's own modules look it up there at each call: the fast paths' checks)."""
    torch.overrides.has_torch_function = has_torch_function_unseen
    try:
        yield
    finally:
        torch.overrides.has_torch_function = _has_torch_function
