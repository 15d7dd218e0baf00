"""The stack torch formats for the snippet is the stack a plain run has.

Anomaly mode (``torch.autograd.detect_anomaly()``, ``set_detect_anomaly(True)``) keeps, for every node
it makes, the Python stack of the forward call that made it, and prints it when backward through the
node fails ("Traceback of forward call that caused the error"). torch asks
``torch.fx.traceback.format_stack`` for it, from C++, at each node. Under the engine that stack holds
the engine's own frames: the frames that run the snippet (``tracer.run``, the host's above it), and
around each torch call the engine's mode and its one-line call (``app.engine.calls``). While the
snippet runs it is formatted from the frames a plain run of the snippet as a script has: from the
snippet's module frame down, a one-line call standing for the snippet's frame that made it.
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from collections.abc import Iterator
from types import FrameType

import torch.fx.traceback as fx_traceback

from app.engine.tracer import CALL_FRAME, SNIPPET_FILENAME


def plain_frames(frame: FrameType | None) -> list[tuple[FrameType, int]]:
    """``frame`` and those above it, outermost first, as a plain run has them (see the module)."""
    frames: list[tuple[FrameType, int]] = []
    while frame is not None:
        code = frame.f_code
        if code.co_name == CALL_FRAME:
            caller = frame.f_locals.get("__c")  # the snippet's frame the call was made for
            if isinstance(caller, FrameType):
                frame = caller
                continue
        frames.append((frame, frame.f_lineno))
        if code.co_name == "<module>" and code.co_filename == SNIPPET_FILENAME:
            break  # above it: the engine and its host, which a script run does not have
        frame = frame.f_back
    frames.reverse()
    return frames


_format_stack = fx_traceback.format_stack


def format_stack() -> list[str]:
    """``torch.fx.traceback.format_stack`` over ``plain_frames``."""
    if fx_traceback.should_preserve_node_meta:  # (tracing a graph: torch answers from its meta)
        return _format_stack()
    return traceback.format_list(traceback.StackSummary.extract(plain_frames(sys._getframe(1))))


@contextlib.contextmanager
def stacks_as_plain() -> Iterator[None]:
    """``torch.fx.traceback.format_stack`` is ``format_stack`` while the block runs."""
    fx_traceback.format_stack = format_stack
    try:
        yield
    finally:
        fx_traceback.format_stack = _format_stack
