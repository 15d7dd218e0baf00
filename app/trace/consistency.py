"""Does a schema-valid trace also agree with itself? The worker's answer is hostile data: a snippet that
takes over its sandboxed process can write any bytes, and pydantic only proves each field's type.

``problem(trace, bounds)`` replays the trace once (``app.trace.replay``) and returns the first thing no
engine run can produce, or None. What it holds every step to (what the engine guarantees, and what the
diagnostics and renderers rely on):

* layout: ``stride`` has one entry per dimension (or none, for a tensor without a storage: sparse and
  nested layouts), sizes, strides, offsets and byte counts are non-negative 64-bit numbers, and a
  tensor's extent fits its storage (``offset + 1 + Σ (size-1)·stride`` elements of its dtype) unless
  the engine said it does not (``unavailable["values"]``: a view of a storage resized smaller);
* values: nested exactly as the shape (at most 64 elements), a summary for the same element count, a
  storage's values one per element of its bytes;
* references: every name, ``storage``, ``grad_fn``, ``grad``, ``_base``, ``next``, ``variable`` and
  ``saved`` id, and a backward step's ``node`` / ``received`` / ``sent``, is alive after that step.
  Past a cap (``StepFields.capped``: "tensors" / "nodes") the engine leaves the objects it did not
  read out of the step, so references to those kinds may dangle there, never names or storages;
* numpy arrays, when set: their layout, within the storage they say they share (or their buffer);
* changes: a dropped id existed before its step and is not set again in it; a live node keeps its
  ``next`` (torch's ``next_functions`` never change; past the node cap, and in the step after it, ids
  may be given anew), and no node is its own ancestor among the nodes a step adds (the autograd
  graph is acyclic; the graph view classifies a step's new nodes by walking them);
* the run: ``ok`` exactly when there is no error, phases with their fields (``node`` on backward steps
  only, ``sent`` aligned with the node's ``next``), and, when ``bounds`` says so, at most ``max_steps``
  steps, ``max_stdout`` characters printed and lines within the snippet.

Linear in the trace: each step costs what it sets or drops (references are counted, not rescanned);
only a failure scans the state once, to name the reference it found dangling.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from typing import Any

from app.schema import ArrayFact, DeltaStep, DeltaTrace, NodeFact, StorageFact, TensorFact
from app.trace.replay import Changes, State, replay

MAX_VALUES = 64  # the engine sends values for tensors of at most this many elements
LIMIT = 1 << 63  # torch's sizes, strides, offsets and byte counts are int64
BITS = re.compile(r"^(?:u?int|float|bfloat|complex)(\d+)$")  # float32 -> 4 bytes, complex64 -> 8
TARGETS = ("tensors", "storages", "nodes")
_OLD_TARGETS = tuple((kind, "old_" + kind) for kind in TARGETS)  # (kind, its ``Changes`` attribute)
_OLD_REFERRERS = tuple((kind, "old_" + kind) for kind in ("variables", "tensors", "nodes"))


@dataclass(frozen=True)
class Bounds:
    """What the server asked the run for (None: not checked)."""

    lines: int | None = None  # lines of the snippet
    max_steps: int | None = None
    max_stdout: int | None = None  # characters printed, all steps together
    max_weight: int | None = None  # ``weight`` of all steps together


FACT_WEIGHT = 4  # a fact's model is ~0.5-2 KB, a name's or a dropped id's ~0.1-0.2 KB


def weight(facts: int, names: int) -> int:
    """What an answer's entries cost to hold, in names: each fact (tensor, storage, node, array)
    counts ``FACT_WEIGHT``, each name bound and each id dropped one. The server counts it before it
    builds them (``app.sandbox.runner``): bytes alone do not bound the models, since a forged answer
    of one-field facts makes 3-4 times the models per byte an engine's answer does."""
    return FACT_WEIGHT * facts + names


@dataclass(frozen=True)
class Problem:
    """The first inconsistency: at ``step`` (0-based; None: the trace as a whole), and what it is."""

    step: int | None
    reason: str

    def __str__(self) -> str:
        return self.reason if self.step is None else f"step {self.step + 1}: {self.reason}"


class _Found(Exception):  # noqa: N818 - internal control flow, never leaves this module
    def __init__(self, reason: str) -> None:
        self.reason = reason


def problem(trace: DeltaTrace, bounds: Bounds = Bounds(),  # noqa: B008 - frozen
            counted: bool = False) -> Problem | None:
    """The first inconsistency of ``trace``, or None when every step agrees with itself. ``counted``:
    its steps and their weight were held to ``bounds`` already (``over_bounds``, before it was built)."""
    found = ok_problem(trace) if counted else whole_problem(trace, bounds)
    if found is not None:
        return found
    checker = _Checker(bounds)
    changes = None
    try:
        for state, changes in replay(trace):
            checker.step(state, changes)
    except _Found as found:
        return Problem(changes.index if changes is not None else None, found.reason)
    return None


def whole_problem(trace: DeltaTrace, bounds: Bounds = Bounds()) -> Problem | None:  # noqa: B008 - frozen
    """``problem``'s checks of the trace as a whole (before any step's)."""
    found = ok_problem(trace)
    if found is not None or (bounds.max_steps is None and bounds.max_weight is None):
        return found
    return over_bounds(len(trace.steps), sum(map(step_weight, trace.steps)), bounds)


def ok_problem(trace: DeltaTrace) -> Problem | None:
    """``ok`` exactly when there is no error."""
    if trace.ok != (trace.error is None):
        return Problem(None, "it says ok=" + str(trace.ok).lower() + " with" + ("" if trace.error else "out")
                       + " an error")
    return None


def over_bounds(steps: int, weight: int, bounds: Bounds) -> Problem | None:
    """The verdict on an answer of ``steps`` steps and entries of ``weight`` (``weight``) when it has
    more than the run may make. The server counts them before it builds a model of any
    (``app.sandbox.runner``): a forged answer of 760,000 one-field steps became 2.6 GiB of models, and
    one of 200,000 one-field nodes 340 MiB, when they were built before they were counted."""
    if bounds.max_steps is not None and steps > bounds.max_steps:
        return too_many_steps(bounds)
    if bounds.max_weight is not None and weight > bounds.max_weight:
        return too_heavy(bounds)
    return None


def step_weight(step: DeltaStep) -> int:
    facts = len(step.tensors) + len(step.storages) + len(step.nodes) + len(step.arrays)
    dropped = step.dropped
    names = len(step.variables) + sum(len(getattr(dropped, kind)) for kind in DROPPED_KINDS)
    return weight(facts, names)


DROPPED_KINDS = ("variables", "tensors", "storages", "nodes", "arrays")


def too_heavy(bounds: Bounds) -> Problem:
    """The verdict on an answer with more entries than an engine's answer of the largest size has."""
    return Problem(None, f"it holds more facts and names than the {bounds.max_weight} allowed")


def too_many_steps(bounds: Bounds) -> Problem:
    """The verdict on an answer with more steps than the run may make: refused as a whole. The
    server counts them before it builds any (``app.sandbox.runner``), so the count past the limit is
    not known."""
    return Problem(None, f"it has more than the {bounds.max_steps} steps allowed")


def step_checker(bounds: Bounds = Bounds()) -> Callable[[State, Changes], None]:  # noqa: B008 - frozen
    """``problem``'s checks of each step, for steps replayed one by one as they come (the server reads
    a run's steps while it goes on, ``app.sandbox.runner.AnswerReader``): raises ``Inconsistent`` at
    the first bad one. ``whole_problem`` is the rest of ``problem``."""
    checker = _Checker(bounds)

    def check(state: State, changes: Changes) -> None:
        try:
            checker.step(state, changes)
        except _Found as found:
            raise Inconsistent(Problem(changes.index, found.reason)) from None

    return check


class Inconsistent(ValueError):
    """A step ``step_checker`` refused; ``problem`` says which and why."""

    def __init__(self, found: Problem) -> None:
        super().__init__(str(found))
        self.problem = found


def itemsize(dtype: str, storage: StorageFact) -> int:
    """Bytes per element of ``dtype`` (a tensor may view its storage as another dtype)."""
    size = _dtype_size(dtype)
    return size if size is not None else max(storage.element_size, 1)


@lru_cache(maxsize=256)  # a run names a handful of dtypes; a forged one cannot grow this past the cap
def _dtype_size(dtype: str) -> int | None:
    """Bytes per element that ``dtype``'s name says (None: it says none: the storage's are used)."""
    if dtype == "bool":
        return 1
    match = BITS.match(dtype)
    return int(match.group(1)) // 8 if match and int(match.group(1)) % 8 == 0 else None


def extent(fact: TensorFact) -> int:
    """One past the last storage element the tensor can reach (0: it reaches none)."""
    if 0 in fact.shape:
        return 0
    end = fact.storage_offset + 1
    for n, s in zip(fact.shape, fact.stride, strict=True):  # a loop, not sum(): a call for every tensor set
        end += (n - 1) * s
    return end


# What validated values hold below their lists (``schema.Scalar``): a row whose items are all of
# these types has no list in it, found without a Python-level step per item.
_SCALARS = frozenset({float, int, bool, str, type(None)})


_LIST = frozenset({list})


def _flat(values: list) -> bool:
    """No item of ``values`` is a list (the set test proves it for plain scalars; anything else is
    asked item by item, as it always was)."""
    return _SCALARS.issuperset(map(type, values)) or not any(isinstance(item, list) for item in values)


def _nested(values: Any, shape: list[int], depth: int = 0) -> bool:
    """``values`` is nested lists exactly as ``shape`` says, with scalars at the bottom."""
    if depth == len(shape):
        return not isinstance(values, list)
    if not isinstance(values, list) or len(values) != shape[depth]:
        return False
    if depth + 1 == len(shape):  # the innermost lists: scalars, checked without a call for each
        return _flat(values)
    if depth + 2 == len(shape):  # rows of scalars (a matrix, the common case): no call per row
        width = shape[depth + 1]
        if _LIST.issuperset(map(type, values)):  # plain lists (as validated values are): whole at once
            return {width}.issuperset(map(len, values)) and _flat(list(chain.from_iterable(values)))
        for row in values:  # noqa: SIM110 - a loop: all() would add a generator step per row
            if not isinstance(row, list) or len(row) != width or not _flat(row):
                return False
        return True
    return all(_nested(item, shape, depth + 1) for item in values)


def _int64(value: int) -> bool:
    return 0 <= value < LIMIT


def check_tensor(tid: str, fact: TensorFact) -> None:
    """What one tensor fact must say about itself (its storage is checked by the caller)."""
    numbers = (*fact.shape, *fact.stride, fact.storage_offset)  # never empty: the offset is one
    if min(numbers) < 0 or max(numbers) >= LIMIT:  # every one an int64 (as ``_int64``, in two calls)
        raise _Found(f"tensor {tid} has a negative or out-of-range size, stride or offset")
    if fact.version is not None and not _int64(fact.version):
        raise _Found(f"tensor {tid} has version {fact.version}")
    if (fact.stride or fact.storage is not None) and len(fact.stride) != len(fact.shape):
        raise _Found(f"tensor {tid} has {len(fact.stride)} strides for {len(fact.shape)} dimensions")
    unknown_shape = "shape" in fact.unavailable
    if fact.values is not None:
        if unknown_shape or "values" in fact.unavailable:
            raise _Found(f"tensor {tid} has values the trace says were unavailable")
        if math.prod(fact.shape) > MAX_VALUES:
            raise _Found(f"tensor {tid} carries values for more than {MAX_VALUES} elements")
        if not _nested(fact.values, fact.shape):
            raise _Found(f"tensor {tid}'s values are not nested as its shape {fact.shape}")
    if fact.summary is not None and not unknown_shape and fact.summary.numel != math.prod(fact.shape):
        raise _Found(f"tensor {tid}'s summary counts {fact.summary.numel} elements, its shape "
                     f"{math.prod(fact.shape)}")


def check_storage(sid: str, fact: StorageFact) -> None:
    if not _int64(fact.nbytes) or not 1 <= fact.element_size <= 64:
        raise _Found(f"storage {sid} has {fact.nbytes} bytes of {fact.element_size}-byte elements")
    if fact.values is not None and len(fact.values) != fact.nbytes // fact.element_size:
        raise _Found(f"storage {sid} has {len(fact.values)} values for "
                     f"{fact.nbytes // fact.element_size} elements")


def check_array(aid: str, fact: ArrayFact, state: State) -> None:
    """A numpy array fact, when it is set: its own layout, and the bytes it reaches inside the
    storage it says it shares (the engine matched it by that memory range), or inside its buffer."""
    if len(fact.strides) != len(fact.shape) or not all(map(_int64, (*fact.shape, fact.offset))):
        raise _Found(f"array {aid} has {len(fact.strides)} strides for {len(fact.shape)} dimensions, or a "
                     "negative size or offset")
    if not 1 <= fact.itemsize <= 64 or not all(abs(stride) < LIMIT for stride in fact.strides):
        raise _Found(f"array {aid} has {fact.itemsize}-byte items or an out-of-range stride")
    too_many = math.prod(fact.shape) > MAX_VALUES
    if fact.values is not None and (too_many or not _nested(fact.values, fact.shape)):
        raise _Found(f"array {aid}'s values are not nested as its shape {fact.shape}")
    if fact.storage is not None:
        storage = state.storages.get(fact.storage)
        if storage is None:
            raise _Found(f"array {aid} refers to storage {fact.storage}, which does not exist here")
        size = storage.nbytes
    else:
        size = fact.buffer_nbytes
    if size is None or any(n == 0 for n in fact.shape):
        return
    low = fact.offset + sum(min(0, (n - 1) * st) for n, st in zip(fact.shape, fact.strides, strict=True))
    high = fact.offset + sum(max(0, (n - 1) * st) for n, st in zip(fact.shape, fact.strides, strict=True))
    if low < 0 or high + fact.itemsize > size:
        raise _Found(f"array {aid} reaches bytes {low} to {high + fact.itemsize} of a {size}-byte buffer")


def check_extent(tid: str, fact: TensorFact, storage: StorageFact) -> None:
    unavailable = fact.unavailable
    if unavailable and ("values" in unavailable or "shape" in unavailable):
        return  # the engine saw it reach past its storage (resized smaller) and read no values
    end = extent(fact) * itemsize(fact.dtype, storage)
    if end > storage.nbytes:
        raise _Found(f"tensor {tid} reaches byte {end} of storage {fact.storage}, which has "
                     f"{storage.nbytes}")


def _references(kind: str, fact: Any) -> Iterator[tuple[str, str]]:
    """(target kind, id) of everything a live fact refers to: variables to tensors, tensors to their
    storage, node, .grad and ._base, nodes to their next nodes, leaf and saved tensors."""
    if kind == "variables":
        yield "tensors", fact
    elif kind == "tensors":
        if fact.storage is not None:
            yield "storages", fact.storage
        if fact.grad_fn is not None:
            yield "nodes", fact.grad_fn
        for target in (fact.grad, fact.base):
            if target is not None:
                yield "tensors", target
    else:
        for target in fact.next:
            if target is not None:
                yield "nodes", target
        if fact.variable is not None:
            yield "tensors", fact.variable
        for target in fact.saved.values():
            if target is not None:
                yield "tensors", target


def _same_tensor_references(old: TensorFact, new: TensorFact) -> bool:
    return (old.storage == new.storage and old.grad_fn == new.grad_fn and old.grad == new.grad
            and old.base == new.base)


def _same_node_references(old: NodeFact, new: NodeFact) -> bool:
    return old.next == new.next and old.variable == new.variable and old.saved == new.saved


# kind -> do two facts of it refer to the same targets, as many times each (what ``_references`` yields)
_SAME_REFERENCES: dict[str, Callable[[Any, Any], bool]] = {
    "variables": operator.eq, "tensors": _same_tensor_references, "nodes": _same_node_references,
}


class _Checker:
    """The counts carried from step to step, so that each step costs what it changed."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.printed = 0
        # (target kind, id) -> how many live facts refer to it; strict ones (names, storages) apart.
        self.refs: dict[tuple[str, str], list[int]] = {}
        self.dangling = {"strict": 0, "tensors": 0, "storages": 0, "nodes": 0}  # storages: strict only
        self.on_storage: dict[str, set[str]] = {}  # storage id -> live tensors on it
        self.rank: dict[str, int] = {}  # node -> 1 + the longest path below it among known nodes
        self.nodes_capped = False  # the previous step was cut by the node cap

    def step(self, state: State, changes: Changes) -> None:
        delta = changes.delta
        self._header(delta)
        if delta.dropped:  # most steps drop nothing: five kinds' loops skipped
            self._drops(changes)
        for sid in delta.storages:
            check_storage(sid, state.storages[sid])
        for tid, fact in delta.tensors.items():
            check_tensor(tid, fact)
        for aid, fact in delta.arrays.items():
            check_array(aid, fact, state)
        self._presence(state, changes)
        self._count(state, changes)
        self._layouts(state, changes)
        self._nodes(state, changes)
        self._dangling(state, delta.capped)
        self._backward(state, changes)

    def _header(self, delta: Any) -> None:
        bounds = self.bounds
        limit = bounds.lines if bounds.lines is not None else LIMIT
        if not 0 <= delta.line <= limit:
            raise _Found(f"it is at line {delta.line} of a {limit}-line snippet")
        self.printed += len(delta.stdout)
        if bounds.max_stdout is not None and self.printed > bounds.max_stdout:
            raise _Found(f"the run printed more than the {bounds.max_stdout} characters allowed")
        if delta.phase == "forward" and (delta.node is not None or delta.received or delta.sent):
            raise _Found("a forward step carries a backward pass's node or gradients")
        if delta.phase == "backward" and delta.node is None:
            raise _Found("a backward step names no node")

    def _drops(self, changes: Changes) -> None:
        delta = changes.delta
        for kind in ("variables", *TARGETS, "arrays"):
            old = getattr(changes, "old_" + kind)
            set_here = getattr(delta, kind)
            for ident in getattr(delta.dropped, kind):
                if old.get(ident) is None:
                    raise _Found(f"it drops {_what(kind, ident)}, which does not exist")
                if ident in set_here:
                    raise _Found(f"it both drops and sets {_what(kind, ident)}")

    def _presence(self, state: State, changes: Changes) -> None:
        """Targets that appeared or disappeared: their referrers stop or start dangling."""
        for kind, old_kind in _OLD_TARGETS:
            olds = getattr(changes, old_kind)
            if not olds:
                continue
            current = getattr(state, kind)
            for ident, old in olds.items():
                counts = self.refs.get((kind, ident))
                if counts is None or (old is None) == (ident not in current):
                    continue
                sign = 1 if old is not None else -1  # gone: its references now dangle
                self.dangling["strict"] += sign * counts[0]
                self.dangling[kind] += sign * counts[1]

    def _count(self, state: State, changes: Changes) -> None:
        for kind, old_kind in _OLD_REFERRERS:
            olds = getattr(changes, old_kind)
            if not olds:
                continue
            current = getattr(state, kind)
            same = _SAME_REFERENCES[kind]
            for ident, old in olds.items():
                new = current.get(ident)
                if old is not None and new is not None and same(old, new):
                    continue  # a fact set anew with the same references: -1 and +1 would cancel
                if old is not None:
                    self._refer(state, kind, old, -1)
                if new is not None:
                    self._refer(state, kind, new, 1)

    def _refer(self, state: State, kind: str, fact: Any, sign: int) -> None:
        refs, dangling, named = self.refs, self.dangling, kind == "variables"
        for target, ident in _references(kind, fact):
            key = (target, ident)
            counts = refs.get(key)
            if counts is None:
                counts = refs[key] = [0, 0]
            strict = named or target == "storages"
            counts[0 if strict else 1] += sign
            if ident not in getattr(state, target):
                dangling["strict" if strict else target] += sign
            if not counts[0] and not counts[1]:
                del refs[key]

    def _layouts(self, state: State, changes: Changes) -> None:
        """Every tensor set here fits its storage; a storage whose size changed still fits its tensors."""
        on_storage, storages = self.on_storage, state.storages
        for tid, old in changes.old_tensors.items():
            fact = state.tensors.get(tid)
            old_sid = old.storage if old is not None else None
            sid = fact.storage if fact is not None else None
            # Moved out and back in even when it stays on its storage: the set's iteration order (the
            # first misfit a resize names) is the one it always had.
            if old_sid is not None:
                on_storage.get(old_sid, set()).discard(tid)
            if sid is not None:
                on_storage.setdefault(sid, set()).add(tid)
                storage = storages.get(sid)
                if storage is not None:
                    check_extent(tid, fact, storage)  # type: ignore[arg-type] - sid is not None: fact is
        for sid, old in changes.old_storages.items():
            storage = state.storages.get(sid)
            if storage is None:
                continue
            if old is not None and old.nbytes != storage.nbytes:  # resize_: rare, so rechecked whole
                for tid in self.on_storage.get(sid, ()):
                    check_extent(tid, state.tensors[tid], storage)

    def _nodes(self, state: State, changes: Changes) -> None:
        # Past the node cap the engine may meet a node again under a new id (an AccumulateGrad it
        # could not read is forgotten), so its parents' next ids change there and in the step after.
        loose = "nodes" in changes.delta.capped or self.nodes_capped
        self.nodes_capped = "nodes" in changes.delta.capped
        added: dict[str, NodeFact] = {}
        for nid, old in changes.old_nodes.items():
            fact = state.nodes.get(nid)
            if fact is None:
                self.rank.pop(nid, None)
            elif old is None:
                added[nid] = fact
            elif old.next != fact.next and not loose:
                raise _Found(f"node {nid}'s next functions changed (torch never changes them)")
        for nid in added:
            if nid not in self.rank:
                self._rank(nid, added)

    def _rank(self, start: str, added: dict[str, NodeFact]) -> None:
        """Rank the nodes added at this step below ``start`` (iterative: graphs are long chains)."""
        visiting = {start}
        stack: list[tuple[str, Iterator[str | None]]] = [(start, iter(added[start].next))]
        while stack:
            nid, pending = stack[-1]
            for target in pending:
                if target in visiting:
                    raise _Found(f"node {target} is its own ancestor (the autograd graph is acyclic)")
                if target is not None and target in added and target not in self.rank:
                    visiting.add(target)
                    stack.append((target, iter(added[target].next)))
                    break
            else:
                stack.pop()
                visiting.discard(nid)
                self.rank[nid] = 1 + max((self.rank.get(t, 0) for t in added[nid].next if t is not None),
                                         default=0)

    def _dangling(self, state: State, capped: dict[str, int]) -> None:
        dangling = self.dangling
        if dangling["strict"] or (dangling["tensors"] and "tensors" not in capped) or \
                (dangling["nodes"] and "nodes" not in capped):
            raise _Found(_name_dangling(state, capped))

    def _backward(self, state: State, changes: Changes) -> None:
        delta = changes.delta
        if delta.phase != "backward":
            return
        node = state.nodes.get(delta.node or "")
        if node is None and "nodes" not in delta.capped:
            raise _Found(f"its backward node {delta.node} does not exist")
        if node is not None and delta.sent and len(delta.sent) != len(node.next):
            raise _Found(f"it sends {len(delta.sent)} gradients along {len(node.next)} edges")
        for tid in (*delta.received, *delta.sent):
            if tid is not None and tid not in state.tensors and "tensors" not in delta.capped:
                raise _Found(f"its backward pass names tensor {tid}, which does not exist")


def _what(kind: str, ident: str) -> str:
    return f"name {ident!r}" if kind == "variables" else f"{kind[:-1]} {ident}"


def _name_dangling(state: State, capped: dict[str, int]) -> str:
    """The first reference to something not alive (a failure only: one scan of the state)."""
    for kind in ("variables", "tensors", "nodes"):
        for ident, fact in getattr(state, kind).items():
            for target, ref in _references(kind, fact):
                strict = kind == "variables" or target == "storages"
                if ref not in getattr(state, target) and (strict or target not in capped):
                    return f"{_what(kind, ident)} refers to {target[:-1]} {ref}, which does not exist"
    return "a reference does not resolve"  # the counts say so; nothing else is expected here
