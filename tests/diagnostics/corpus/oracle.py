"""Each corpus label checked in plain torch, without the explorer: the snippet runs as Python runs it
(the engine's prelude: ``torch``, ``nn``, ``F``, ``math``), watched by a small tracer of its own.

* ``Grows``: at every visit of the loop header, the autograd nodes alive (every live tensor's
  ``grad_fn`` graph, ``AccumulateGrad`` leaves aside) are counted; a leak's count rises at each of
  the last visits, a bounded loop's ends no higher than it was early on.
* ``Untrained``: at every line, each parameter expression is evaluated; "trained" means its ``.grad``
  was set at some point, "untrained" that it never was while an optimizer (or a list the update
  loop walks) holds it.
* ``Shares`` / ``Raises``: memory shared at the end; the error the run stops with.
"""

from __future__ import annotations

import math
import sys
from collections import deque
from dataclasses import dataclass, field
from functools import partial
from types import FrameType, FunctionType, MethodType, ModuleType
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from tests.diagnostics.corpus.cases import (
    Accumulates,
    Case,
    Cleared,
    Grows,
    Raises,
    Runs,
    Shares,
    Stale,
    Untrained,
)

FILENAME = "<corpus>"


@dataclass
class Watch:
    header: int | None = None
    params: tuple[str, ...] = ()
    counts: list[int] = field(default_factory=list)
    got_grad: dict[str, bool] = field(default_factory=dict)
    held: dict[str, bool] = field(default_factory=dict)
    # ``Accumulates``: each parameter's values when last seen, whether it changed since the last
    # visit of the backward() line, and whether a visit found a used gradient still there
    last: dict[str, torch.Tensor] = field(default_factory=dict)
    updated: dict[str, bool] = field(default_factory=dict)
    carried: bool = False
    # ``Stale``: every tensor a parameter expression named, with its values when first seen (kept:
    # ids stay unique)
    first: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    # ``Cleared``: a backward() ran since the last visit of the step line; the parameters' values at a
    # visit that found every .grad None (compared at the next line: the step must leave them), and
    # what the visits found
    backward: bool = False
    skipped: dict[str, torch.Tensor] = field(default_factory=dict)
    cleared_visits: int = 0
    moved: list[str] = field(default_factory=list)


def reachable_tensors(frames: list[FrameType]) -> list[torch.Tensor]:
    """Every tensor a name of the snippet reaches: its frames' variables, and what they hold — lists,
    dicts, tuples, deques, sets, objects' attributes, modules (their hooks too), optimizers, the
    closures of the snippet's own functions. Python's view of "reachable from a name", in plain
    Python: no explorer code."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    stack: list[Any] = []
    for frame in frames:
        stack.extend(frame.f_locals.values())
        stack.extend(v for k, v in frame.f_globals.items() if not k.startswith("__"))
    while stack:
        value = stack.pop()
        if id(value) in seen or isinstance(value, type | ModuleType):
            continue
        seen.add(id(value))
        if isinstance(value, torch._C.TensorBase):  # the C class: no Python isinstance hook, fast
            found.append(value)  # type: ignore[arg-type]
            stack.extend(t for t in (value.grad, value._base) if t is not None)
        elif isinstance(value, dict):
            stack.extend(value.values())
            stack.extend(value.keys())
        elif isinstance(value, list | tuple | set | frozenset | deque):
            stack.extend(value)
        elif isinstance(value, FunctionType):
            if value.__code__.co_filename == FILENAME:  # the snippet's own (a hook, a helper)
                stack.extend(c.cell_contents for c in value.__closure__ or () if _filled(c))
                stack.extend(value.__defaults__ or ())
        elif isinstance(value, MethodType):
            stack.append(value.__self__)
            stack.append(value.__func__)
        elif isinstance(value, partial):
            stack.extend([value.func, *value.args, *value.keywords.values()])
        elif isinstance(value, nn.Module | torch.optim.Optimizer) or (
                hasattr(value, "__dict__") and not callable(value)):  # a module, an object of the snippet's
            stack.extend(vars(value).values())
    return found


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def live_nodes(frames: list[FrameType]) -> int:
    """Autograd nodes behind every tensor the snippet reaches (each counted once; AccumulateGrad,
    a leaf's own, aside)."""
    seen: set[int] = set()
    keep: list[Any] = []  # held while counting: ids stay unique
    queue = [t.grad_fn for t in reachable_tensors(frames) if t.grad_fn is not None]
    count = 0
    while queue:
        node = queue.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        keep.append(node)
        if type(node).__name__ != "AccumulateGrad":
            count += 1
        queue.extend(fn for fn, _ in node.next_functions)
    return count


def _evaluate(expression: str, namespace: dict[str, Any]) -> Any:
    try:
        return eval(expression, namespace)  # noqa: S307 - the corpus's own expressions
    except Exception:  # noqa: BLE001 - not defined yet at this line
        return None


def _held(tensor: torch.Tensor, namespace: dict[str, Any]) -> bool:
    """An optimizer holds the tensor, or a list the snippet keeps does (a hand-written update)."""
    for value in list(namespace.values()):
        if isinstance(value, torch.optim.Optimizer):
            if any(p is tensor for group in value.param_groups for p in group["params"]):
                return True
        elif isinstance(value, list):
            if any(item is tensor for item in value):
                return True
        elif hasattr(value, "__dict__") and not isinstance(value, type | nn.Module):  # a trainer object
            owned = [v for v in vars(value).values() if isinstance(v, torch.optim.Optimizer)]
            if any(_held(tensor, {"o": v}) for v in owned):
                return True
    return False


def run_plain(case: Case) -> tuple[dict[str, Any], Watch, BaseException | None]:
    """Run the case's code in plain torch under the watch its oracle needs."""
    oracle = case.oracle
    watch = Watch()
    if isinstance(oracle, Grows | Accumulates | Cleared):
        watch.header = case.line_of(_line(oracle.at))
    if isinstance(oracle, Untrained):
        watch.params = oracle.params
        watch.got_grad = dict.fromkeys(oracle.params, False)
        watch.held = dict.fromkeys(oracle.params, False)
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "__main__"}

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line" and isinstance(oracle, Cleared):
            _clearing(watch, oracle, frame)
        elif event == "line" and isinstance(oracle, Accumulates):
            _accumulation(watch, oracle, frame)
        elif event == "line" and isinstance(oracle, Stale):
            for expression in oracle.params:
                tensor = _evaluate(expression, {**frame.f_globals, **frame.f_locals})
                if isinstance(tensor, torch.Tensor) and id(tensor) not in watch.first:
                    watch.first[id(tensor)] = (tensor, tensor.detach().clone())
        elif event == "line":
            if frame.f_lineno == watch.header:
                frames, f = [], frame
                while f is not None:
                    if f.f_code.co_filename == FILENAME:
                        frames.append(f)
                    f = f.f_back
                watch.counts.append(live_nodes(frames))
            for expression in watch.params:
                tensor = _evaluate(expression, frame.f_globals)
                if isinstance(tensor, torch.Tensor):
                    watch.got_grad[expression] |= tensor.grad is not None
                    watch.held[expression] |= _held(tensor, frame.f_globals)
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_filename == FILENAME else None

    torch.manual_seed(0)
    error: BaseException | None = None
    if isinstance(oracle, Cleared):  # each loss.backward() the snippet calls
        original = torch.Tensor.backward

        def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            watch.backward = True
            return original(self, *args, **kwargs)

        torch.Tensor.backward = backward  # type: ignore[method-assign]
    sys.settrace(calls)
    try:
        exec(compile(case.code, FILENAME, "exec"), namespace)  # noqa: S102 - the corpus's own code
    except Exception as caught:  # noqa: BLE001 - a label may be the error itself
        error = caught
    finally:
        sys.settrace(None)
        if isinstance(oracle, Cleared):
            torch.Tensor.backward = original  # type: ignore[method-assign]
    if isinstance(oracle, Untrained):  # the end of the run, after its last line
        for expression in watch.params:
            tensor = _evaluate(expression, namespace)
            if isinstance(tensor, torch.Tensor):
                watch.got_grad[expression] |= tensor.grad is not None
                watch.held[expression] |= _held(tensor, namespace)
    return namespace, watch, error


def _accumulation(watch: Watch, oracle: Accumulates, frame: FrameType) -> None:
    """Before each line: which parameters changed since they were last seen (an update ran); at the
    backward() line, whether one that changed since the last visit still has a nonzero .grad."""
    for expression in oracle.params:
        tensor = _evaluate(expression, {**frame.f_globals, **frame.f_locals})
        if not isinstance(tensor, torch.Tensor):
            continue
        value = tensor.detach()
        last = watch.last.get(expression)
        if last is not None and last.shape == value.shape and not torch.equal(last, value):
            watch.updated[expression] = True
        watch.last[expression] = value.clone()
        if frame.f_lineno == watch.header:
            grad = tensor.grad
            if watch.updated.get(expression) and grad is not None and bool(grad.ne(0).any()):
                watch.carried = True
            watch.updated[expression] = False


def _clearing(watch: Watch, oracle: Cleared, frame: FrameType) -> None:
    """At the step line, after a backward(): is every .grad None or zero; where all are None, the
    step must leave the parameters as they were (checked at the next line)."""
    namespace = {**frame.f_globals, **frame.f_locals}
    for expression, before in list(watch.skipped.items()):
        tensor = _evaluate(expression, namespace)
        if isinstance(tensor, torch.Tensor) and not torch.equal(before, tensor.detach()):
            watch.moved.append(expression)
    watch.skipped.clear()
    if frame.f_lineno != watch.header or not watch.backward:
        return
    watch.backward = False
    tensors = [_evaluate(e, namespace) for e in oracle.params]
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        return
    grads = [t.grad for t in tensors]
    if all(g is None or not bool(g.ne(0).any()) for g in grads):
        watch.cleared_visits += 1
        if all(g is None for g in grads):
            watch.skipped = {e: t.detach().clone() for e, t in zip(oracle.params, tensors, strict=True)}


def _stale(oracle: Stale, namespace: dict[str, Any], watch: Watch) -> str | None:
    """Each parameter at the end: has a .grad; held by an optimizer; changed since first seen."""
    optimizers = [v for v in namespace.values() if isinstance(v, torch.optim.Optimizer)]
    for expression in oracle.params:
        tensor = _evaluate(expression, namespace)
        if not isinstance(tensor, torch.Tensor) or id(tensor) not in watch.first:
            return f"{expression} is not a tensor the run named"
        held = any(p is tensor for o in optimizers for group in o.param_groups for p in group["params"])
        same = torch.equal(watch.first[id(tensor)][1], tensor.detach())
        stale = tensor.grad is not None and not held and same
        if stale != oracle.stale or (not oracle.stale and (not held or same)):
            return f"{expression}: gradient {tensor.grad is not None}, held {held}, unchanged {same}"
    return None


def _line(fragment: str) -> Any:
    from tests.diagnostics.corpus.cases import Finding

    return Finding("", "", fragment, "")


def check(case: Case) -> str | None:
    """None when plain torch agrees with the case's label, else what it saw instead."""
    namespace, watch, error = run_plain(case)
    oracle = case.oracle
    if isinstance(oracle, Raises):
        if error is None or oracle.text not in str(error):
            return f"expected an error with {oracle.text!r}, got {error!r}"
        return None
    if error is not None:
        return f"the run failed: {error!r}"
    if isinstance(oracle, Runs):
        return None
    if isinstance(oracle, Stale):
        return _stale(oracle, namespace, watch)
    if isinstance(oracle, Cleared):
        if watch.moved:
            return f"a step with every .grad None moved {watch.moved}"
        cleared = watch.cleared_visits > 0
        return None if cleared == oracle.cleared else f"gradients cleared before the step: {cleared}"
    if isinstance(oracle, Accumulates):
        return None if watch.carried == oracle.accumulates else f"a used gradient added to: {watch.carried}"
    if isinstance(oracle, Grows):
        counts = watch.counts
        if len(counts) < 4:
            return f"the header was visited {len(counts)} times"
        rising = counts[-3] < counts[-2] < counts[-1]
        # steady at the end, or back down to where it was early on (a window that empties)
        bounded = counts[-3] == counts[-2] == counts[-1] or (counts[-1] <= max(counts[:4]) and not rising)
        if oracle.grows and not rising:
            return f"live nodes do not grow: {counts}"
        if not oracle.grows and not bounded:
            return f"live nodes grow: {counts}"
        return None
    if isinstance(oracle, Untrained):
        for expression in oracle.params:
            if oracle.trained and not watch.got_grad[expression]:
                return f"{expression} never got a gradient"
            if not oracle.trained and (watch.got_grad[expression] or not watch.held[expression]):
                return f"{expression}: gradient {watch.got_grad[expression]}, held {watch.held[expression]}"
        return None
    if isinstance(oracle, Shares):
        a, b = _evaluate(oracle.alias, namespace), _evaluate(oracle.original, namespace)
        same = a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
        return None if same == oracle.shares else f"shares memory: {same}"
    return f"unknown oracle {oracle!r}"
