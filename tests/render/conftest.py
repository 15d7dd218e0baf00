"""Fixtures for the view-model tests: real traces from the engine, torch as the oracle."""

from __future__ import annotations

import itertools
from functools import lru_cache

import pytest

from app.render import build_explorer, frame_at
from app.render.explorer import ExplorerView
from app.schema import DeltaTrace, RunResult
from app.trace.delta import expand


@lru_cache(maxsize=64)
def trace(code: str) -> DeltaTrace:
    """The engine's trace of ``code``, validated like the server validates the worker's answer."""
    from app.engine import trace_delta  # torch: only the tests and the worker import it

    return DeltaTrace.model_validate(trace_delta(code))


def trace_v1(code: str) -> RunResult:
    """The same trace with every step whole, for tests that look at one step's state."""
    return expand(trace(code))


def explore(code: str, step: int | None = None) -> ExplorerView:
    return build_explorer(trace(code), code, step)


def torch_cells(tensor) -> dict[int, list[tuple[int, ...]]]:
    """Storage element -> tensor indices living there, asked of torch itself (data pointers)."""
    base = tensor.untyped_storage().data_ptr()
    cells: dict[int, list[tuple[int, ...]]] = {}
    for index in itertools.product(*(range(n) for n in tensor.shape)):
        cell = (tensor[index].data_ptr() - base) // tensor.element_size()
        cells.setdefault(cell, []).append(index)
    return cells


def run_namespace(code: str) -> dict:
    """Run ``code`` with torch the way the engine does, to compare with its trace."""
    import torch

    namespace = {"torch": torch}
    torch.manual_seed(0)
    exec(code, namespace)  # noqa: S102 - test snippets written here
    return namespace


@pytest.fixture
def views_code() -> str:
    return (
        "x = torch.arange(12.).reshape(3, 4)\n"
        "t = x.t()\n"
        "s = x[::2, 1::2]\n"
        "n = x[1:, 2]\n"
        "e = torch.arange(3.).expand(2, 3)\n"
        "c = x.clone()\n"
        "d = x.detach()\n"
    )


def shown_strips(view: ExplorerView, step: int | None = None) -> list:
    """(group, strip) of every memory strip on screen at ``step`` (default: the step shown first)."""
    frame = frame_at(view, step)
    return [(group, strip) for group, strip in view.memory.strips() if frame.shows(strip.k)]


def strip_of(view: ExplorerView, tid: str, step: int | None = None):
    """The strip on screen at ``step`` that has a row for tensor ``tid`` (and its group)."""
    frame = frame_at(view, step)
    found = [(g, s) for g, s in shown_strips(view, step) if any(frame.ref(r.k) == tid for r in s.rows)]
    assert len(found) == 1, f"{len(found)} strips show {tid} at step {frame.step}"
    return found[0]


def row_of(view: ExplorerView, tid: str, step: int | None = None):
    frame = frame_at(view, step)
    _, strip = strip_of(view, tid, step)
    return next(r for r in strip.rows if frame.ref(r.k) == tid)
