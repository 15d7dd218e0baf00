"""The trace engine's entry point: code in, a ``RunResult``-shaped dict out.

It knows nothing about the web layer or the sandbox; those call ``trace_snippet``.
"""

from __future__ import annotations

import builtins
import math
import random
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812 - the name learners know
from torch import nn

from app.engine.snapshot import SnapshotTaker
from app.engine.tracer import (
    SNIPPET_FILENAME,
    CappedOutput,
    LineTracer,
    OutputLimitReached,
    StepLimitReached,
    error_line,
    snippet_scopes,
)

SEED = 0


@dataclass(frozen=True)
class EngineLimits:
    max_steps: int = 1000
    max_stdout: int = 64 * 1024


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


def _error(kind: str, error: BaseException, line: int | None, message: str | None = None) -> dict:
    return {
        "kind": kind,
        "type": type(error).__name__,
        "message": (message if message is not None else str(error))[:4000],
        "line": line,
    }


def trace_snippet(
    source: str, limits: EngineLimits | None = None, builtins_namespace: Any = builtins
) -> dict[str, Any]:
    """Run ``source`` and return the trace as plain data shaped like ``app.schema.RunResult``."""
    limits = limits or EngineLimits()
    try:
        code = compile(source, SNIPPET_FILENAME, "exec")
    except SyntaxError as error:
        return {"ok": False, "truncated": False, "steps": [], "error": _error("rejected", error, error.lineno,
                                                                              f"{error.msg}")}
    except (ValueError, RecursionError, MemoryError) as error:  # null bytes, absurd nesting
        return {"ok": False, "truncated": False, "steps": [], "error": _error("rejected", error, None)}

    # Same seed every run, so a permalink reproduces the same numbers.
    torch.manual_seed(SEED)
    random.seed(SEED)

    namespace = prelude(builtins_namespace)
    output = CappedOutput(limits.max_stdout)
    taker = SnapshotTaker()
    steps: list[dict[str, Any]] = []

    def on_step(line: int, frame: FrameType) -> None:
        steps.append(taker.take(line, output.text, snippet_scopes(frame, namespace)))

    tracer = LineTracer(on_step, limits.max_steps)
    error: dict[str, Any] | None = None
    saved_streams = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = output  # type: ignore[assignment]
    try:
        tracer.run(code, namespace)
    except StepLimitReached:
        pass
    except OutputLimitReached as exc:
        error = _error("output", exc, error_line(exc),
                       f"The snippet printed more than {limits.max_stdout // 1024} KiB; output was cut there.")
    except RecursionError as exc:
        error = _error("runtime", exc, error_line(exc))
    except MemoryError as exc:
        error = _error("memory", exc, error_line(exc), "The snippet ran out of memory.")
    except BaseException as exc:  # the snippet's own error is data, not a crash
        error = _error("runtime", exc, error_line(exc))
    finally:
        sys.stdout, sys.stderr = saved_streams
    del namespace
    return {"ok": error is None, "truncated": tracer.truncated, "error": error, "steps": steps}
