"""The engine's frames kept out of the tracebacks the snippet sees.

The engine's ``TorchFunctionMode`` (app.engine.watch) makes every torch call itself, from a one-line
function standing at the caller's line (``CALL_FRAME``, app.engine.calls); a torch function written
in Python (``Tensor.backward``, ``F.softmax``) reaches it through torch's ``handle_torch_function``
from a first entry of its own, and runs its body in a second one. An exception raised by such a call
carries all of those in its traceback, and a snippet that prints one (``traceback.print_exc()``,
``format_exception(e)``) would print frames a plain run has not. ``hide_engine_frames`` splices them
out of the chain (``tb_next`` is writable; the entries themselves are not), when the tracer sees the
exception reach a snippet frame: what is left is the traceback plain torch gives.
"""

from __future__ import annotations

import os
from types import CodeType, TracebackType

import torch

# The name of the engine's one-line call frames, made on the snippet's behalf (app.engine.calls).
CALL_FRAME = "<torch-call>"
_ENGINE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
# A torch function written in Python (F.softmax) reaches the mode through torch's
# handle_torch_function, called from the function's own first frame: its caller is two frames up.
HANDLE_TORCH_FUNCTION = torch.overrides.handle_torch_function.__code__


def engine_code(code: CodeType) -> bool:
    """Whether ``code`` is the engine's: a one-line call frame, or a function of ``app/engine``."""
    return code.co_name == CALL_FRAME or code.co_filename.startswith(_ENGINE_DIR)


def _ours(tb: TracebackType) -> bool:
    return engine_code(tb.tb_frame.f_code)


def hide_engine_frames(head: TracebackType | None) -> None:
    """Unlink from the chain below ``head`` (a snippet frame's entry, kept) the engine's frames, and
    a ``handle_torch_function`` entry that led into them with the first entry that called it."""
    if head is None or head.tb_next is None:
        return
    entries: list[TracebackType] = []
    tb: TracebackType | None = head
    while tb is not None:
        entries.append(tb)
        tb = tb.tb_next
    drop = [False] + [_ours(entry) for entry in entries[1:]]
    if not any(drop):
        return  # (the common case: nothing of ours below)
    for index in range(1, len(entries) - 1):
        if entries[index].tb_frame.f_code is HANDLE_TORCH_FUNCTION and drop[index + 1]:
            drop[index] = True
            drop[index - 1] = index - 1 > 0  # (the head stays: its frame is the one running)
    kept = [entry for entry, dropped in zip(entries, drop, strict=True) if not dropped]
    for upper, lower in zip(kept, [*kept[1:], None], strict=True):
        if upper.tb_next is not lower:
            upper.tb_next = lower
