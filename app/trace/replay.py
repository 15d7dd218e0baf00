"""One pass over a delta trace: the state after each step and what that step changed.

``replay(trace)`` yields, for step after step, the same ``State`` object (updated in place: copy what
you keep) and a ``Changes`` that lists what the step touched, with the facts each touched id had
*before* the step. A consumer that only looks at ``Changes`` does work proportional to what the
snippet changed, not to steps × what is alive: that is the point of the delta format.

``Timeline`` answers "what was this id at step i" for any step, by binary search over each id's own
history (built in the same single pass).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from app.schema import ArrayFact, DeltaStep, DeltaTrace, NodeFact, StorageFact, TensorFact

KINDS = ("tensors", "storages", "nodes", "arrays")


@dataclass
class State:
    """Everything alive after the latest replayed step (the v1 ``Step``, kept up to date)."""

    line: int = 0
    stdout_length: int = 0
    variables: dict[str, str] = field(default_factory=dict)
    tensors: dict[str, TensorFact] = field(default_factory=dict)
    storages: dict[str, StorageFact] = field(default_factory=dict)
    nodes: dict[str, NodeFact] = field(default_factory=dict)
    arrays: dict[str, ArrayFact] = field(default_factory=dict)  # numpy arrays (a<n>)


class Changes:
    """What one step did. ``old_*`` hold the value before the step (None: it did not exist) for
    every id the step set or dropped, so "what changed" and "from what" are both at hand.

    (A plain class: a replay makes one a step, and a dataclass's ``__init__`` with five default
    factories took 2 µs to make one, eight times this one's.)"""

    __slots__ = ("delta", "index", "old_arrays", "old_nodes", "old_storages", "old_tensors", "old_variables")

    def __init__(self, index: int, delta: DeltaStep) -> None:
        self.index = index
        self.delta = delta
        self.old_variables: dict[str, str | None] = {}
        self.old_tensors: dict[str, TensorFact | None] = {}
        self.old_storages: dict[str, StorageFact | None] = {}
        self.old_nodes: dict[str, NodeFact | None] = {}
        self.old_arrays: dict[str, ArrayFact | None] = {}

    @property
    def line(self) -> int:
        return self.delta.line

    def appeared(self, kind: str) -> list[str]:
        """Ids of ``kind`` ("tensors", "storages", "nodes", "arrays", "variables") new at this step."""
        old = getattr(self, "old_" + kind)
        return [ident for ident in getattr(self.delta, kind) if old.get(ident) is None]

    def dropped(self, kind: str) -> list[str]:
        return list(getattr(self.delta.dropped, kind))


def replay(trace: DeltaTrace) -> Iterator[tuple[State, Changes]]:
    state = State()
    for index, delta in enumerate(trace.steps):
        changes = Changes(index, delta)
        apply(state, delta, changes)
        yield state, changes


def apply(state: State, delta: DeltaStep, changes: Changes | None = None) -> None:
    """Move ``state`` past one step, noting in ``changes`` what each touched id was before."""
    state.line = delta.line
    state.stdout_length += len(delta.stdout)
    dropped = delta.dropped
    variables = state.variables
    old_variables = changes.old_variables if changes is not None else {}
    for name in dropped.variables:
        old_variables.setdefault(name, variables.pop(name, None))
    for name, tid in delta.variables.items():
        old_variables.setdefault(name, variables.get(name))
        variables[name] = tid
    for kind in KINDS:
        gone, facts = getattr(dropped, kind), getattr(delta, kind)
        if not gone and not facts:
            continue  # most steps change one or two kinds: the rest cost two lookups
        current: dict[str, Any] = getattr(state, kind)
        old: dict[str, Any] = getattr(changes, "old_" + kind) if changes is not None else {}
        for ident in gone:
            old.setdefault(ident, current.pop(ident, None))
        for ident, fact in facts.items():
            old.setdefault(ident, current.get(ident))
            current[ident] = fact


class _History:
    """One id's values over the run: at step ``steps[i]`` it became ``values[i]`` (None: gone)."""

    __slots__ = ("steps", "values")

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.values: list[Any] = []

    def set(self, step: int, value: Any) -> None:
        if self.steps and self.steps[-1] == step:
            self.values[-1] = value
        else:
            self.steps.append(step)
            self.values.append(value)

    def at(self, step: int) -> Any:
        i = bisect_right(self.steps, step) - 1
        return self.values[i] if i >= 0 else None


def _history(histories: dict[str, _History], ident: str) -> _History:
    """``ident``'s history, made at its first change (``setdefault`` would make one at every change)."""
    history = histories.get(ident)
    if history is None:
        history = histories[ident] = _History()
    return history


class Timeline:
    """Random access into a delta trace: any id's value at any step, in O(log changes of that id)."""

    def __init__(self, trace: DeltaTrace | None = None) -> None:
        """Of ``trace``'s steps, or (None) of the steps given to ``add`` one by one."""
        self.lines: list[int] = []
        self._history: dict[str, dict[str, _History]] = {k: {} for k in ("variables", *KINDS)}
        self.first_seen: dict[str, int] = {}  # tensor or node id -> the step it first appears at
        if trace is not None:
            for delta in trace.steps:
                self.add(delta)

    def add(self, delta: DeltaStep) -> None:
        """The next step."""
        index = len(self.lines)
        self.lines.append(delta.line)
        first_seen = self.first_seen
        dropped = delta.dropped if delta.dropped else None  # most steps drop nothing
        for kind, histories in self._history.items():
            if dropped is not None:
                for ident in getattr(dropped, kind):
                    _history(histories, ident).set(index, None)
            facts = getattr(delta, kind)
            if not facts:
                continue
            for ident, value in facts.items():  # ``_history`` inline: this runs for every change
                history = histories.get(ident)
                if history is None:
                    history = histories[ident] = _History()
                history.set(index, value)
            if kind in ("tensors", "nodes"):
                for ident in facts:
                    first_seen.setdefault(ident, index)

    def __len__(self) -> int:
        return len(self.lines)

    def value(self, kind: str, ident: str, step: int) -> Any:
        history = self._history[kind].get(ident)
        if history is None or step < 0:
            return None
        i = bisect_right(history.steps, step) - 1  # ``_History.at``, inline: the rules ask it per fact
        return history.values[i] if i >= 0 else None

    def tensor(self, tid: str | None, step: int) -> TensorFact | None:
        return self.value("tensors", tid, step) if tid is not None else None

    def node(self, nid: str | None, step: int) -> NodeFact | None:
        return self.value("nodes", nid, step) if nid is not None else None

    def storage(self, sid: str | None, step: int) -> StorageFact | None:
        return self.value("storages", sid, step) if sid is not None else None

    def array(self, aid: str | None, step: int) -> ArrayFact | None:
        return self.value("arrays", aid, step) if aid is not None else None

    def variable(self, name: str, step: int) -> str | None:
        return self.value("variables", name, step)

    def by_id(self, kind: str) -> dict[str, _History]:
        """Every id of ``kind``'s history (``value`` reads one; ``app.diagnostics.index.At.reader``)."""
        return self._history[kind]

    def changes_of(self, kind: str, ident: str) -> list[tuple[int, Any]]:
        """Every (step, value) at which ``ident`` was set or dropped (value None), in order."""
        history = self._history[kind].get(ident)
        return list(zip(history.steps, history.values, strict=True)) if history is not None else []

    def ids(self, kind: str) -> list[str]:
        """Every id of ``kind`` that ever appears (O(ids): for whole-run questions, not per step)."""
        return list(self._history[kind])
