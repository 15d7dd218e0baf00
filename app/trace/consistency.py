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

What one fact must say about itself (layout, values, an array's bytes, a tensor's extent) is checked
by ``app.trace.fact_checks``; this module replays, counts references and holds the run to its bounds.

Linear in the trace: each step costs what it sets or drops (references are counted, not rescanned);
only a failure scans the state once, to name the reference it found dangling.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.schema import DeltaStep, DeltaTrace, NodeFact, TensorFact
from app.trace.fact_checks import LIMIT, Found, check_array, check_extent, check_storage, check_tensor
from app.trace.replay import Changes, State, replay

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
    except Found as found:
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
        except Found as found:
            raise Inconsistent(Problem(changes.index, found.reason)) from None

    return check


class Inconsistent(ValueError):
    """A step ``step_checker`` refused; ``problem`` says which and why."""

    def __init__(self, found: Problem) -> None:
        super().__init__(str(found))
        self.problem = found

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
            raise Found(f"it is at line {delta.line} of a {limit}-line snippet")
        self.printed += len(delta.stdout)
        if bounds.max_stdout is not None and self.printed > bounds.max_stdout:
            raise Found(f"the run printed more than the {bounds.max_stdout} characters allowed")
        if delta.phase == "forward" and (delta.node is not None or delta.received or delta.sent):
            raise Found("a forward step carries a backward pass's node or gradients")
        if delta.phase == "backward" and delta.node is None:
            raise Found("a backward step names no node")

    def _drops(self, changes: Changes) -> None:
        delta = changes.delta
        for kind in ("variables", *TARGETS, "arrays"):
            old = getattr(changes, "old_" + kind)
            set_here = getattr(delta, kind)
            for ident in getattr(delta.dropped, kind):
                if old.get(ident) is None:
                    raise Found(f"it drops {_what(kind, ident)}, which does not exist")
                if ident in set_here:
                    raise Found(f"it both drops and sets {_what(kind, ident)}")

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
                raise Found(f"node {nid}'s next functions changed (torch never changes them)")
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
                    raise Found(f"node {target} is its own ancestor (the autograd graph is acyclic)")
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
            raise Found(_name_dangling(state, capped))

    def _backward(self, state: State, changes: Changes) -> None:
        delta = changes.delta
        if delta.phase != "backward":
            return
        node = state.nodes.get(delta.node or "")
        if node is None and "nodes" not in delta.capped:
            raise Found(f"its backward node {delta.node} does not exist")
        if node is not None and delta.sent and len(delta.sent) != len(node.next):
            raise Found(f"it sends {len(delta.sent)} gradients along {len(node.next)} edges")
        for tid in (*delta.received, *delta.sent):
            if tid is not None and tid not in state.tensors and "tensors" not in delta.capped:
                raise Found(f"its backward pass names tensor {tid}, which does not exist")


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
