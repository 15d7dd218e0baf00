"""``torch.jit.trace`` names a traced graph's values after the snippet's variables (``new_h =
torch.tanh(...)`` shows as ``new_h`` in ``traced.code``): torch's lookup walks a fixed number of frames
up from the op that uses the value and reads that frame's locals. Under the engine the op is made
from the engine's mode (``watch.py``) through a call frame of its own (``calls.py``), and torch's
``handle_torch_function`` on the way: counted, those frames land the walk in the engine, the values
go unnamed, and the code the snippet prints is not plain torch's. The lookup here walks the frames a
plain run has: the engine's and ``handle_torch_function``'s are not counted (issue 24, 4: nothing the
engine adds may change what the snippet prints)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import torch
import torch.jit._trace as jit_trace

from app.engine.frames import HANDLE_TORCH_FUNCTION, engine_code


def _ours(frame: FrameType) -> bool:
    code = frame.f_code
    return code is HANDLE_TORCH_FUNCTION or engine_code(code)


def _plain_back(frame: FrameType | None) -> FrameType | None:
    """The first frame at or above ``frame`` that a plain run has too: not the engine's, nor
    ``handle_torch_function`` with the first entry of the function that called it (its body runs in a
    second entry, below the engine's call: the one a plain run has; as ``frames.hide_engine_frames``)."""
    while frame is not None and _ours(frame):
        if frame.f_code is HANDLE_TORCH_FUNCTION:
            frame = frame.f_back
        frame = frame.f_back if frame is not None else None
    return frame


def _lookup_fn(frames_up: int = 1) -> Callable[[Any], str]:
    """torch.jit._trace._create_interpreter_name_lookup_fn, frame for frame as in a plain run."""

    def _get_interpreter_name_for_var(var: Any) -> str:
        frame = _plain_back(sys._getframe(1))
        for _ in range(frames_up):
            frame = _plain_back(frame.f_back) if frame is not None else None
        if frame is None:
            raise RuntimeError("failed to get frame")
        for k, v in frame.f_locals.items():
            if isinstance(v, torch.Tensor) and var is v:
                return k if k != "self" else ""
        return ""

    return _get_interpreter_name_for_var


@contextmanager
def jit_names_as_plain() -> Iterator[None]:
    original = jit_trace._create_interpreter_name_lookup_fn
    jit_trace._create_interpreter_name_lookup_fn = _lookup_fn
    try:
        yield
    finally:
        jit_trace._create_interpreter_name_lookup_fn = original
