"""How every view model is built: one replay of the delta trace, fanned out to view builders.

``drive`` replays the trace once; at each step it brings ``Holding`` (who keeps what alive) up to
date and hands every builder the same ``StepInput``. A builder records what changed at that step —
through ``Tracks.change_*`` — and so costs time proportional to the run's changes, never to
steps × what is alive. ``StepInput`` (and the state in it) is only valid during ``add_step``: copy
what you keep.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from app.render.names import label
from app.schema import DeltaStep, DeltaTrace
from app.trace.holding import HeldReplay, Holding, HoldingChanges, chains_reach
from app.trace.replay import Changes, State


class StorageUsers:
    """Which tensors use each storage, kept from each step's tensor changes."""

    def __init__(self) -> None:
        self.of: dict[str, set[str]] = {}

    def update(self, state: State, changes: Changes) -> None:
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            old_sid = old.storage if old is not None else None
            new_sid = new.storage if new is not None else None
            if old_sid == new_sid:
                continue
            users = self.of.get(old_sid) if old_sid is not None else None
            if users is not None:
                users.discard(tid)
                if not users:
                    del self.of[old_sid]  # type: ignore[arg-type]
            if new_sid is not None:
                self.of.setdefault(new_sid, set()).add(tid)

    def get(self, sid: str) -> set[str]:
        return self.of.get(sid, set())


class Labels:
    """``names.label`` of the live tensors, kept from step to step: a label is made again only after a
    step that may have changed how it reads (a long run labels the same tensors at every step: an
    optimizer's parameters and their state, three times an iteration)."""

    def __init__(self) -> None:
        self.of: dict[str, str] = {}

    def update(self, state: State, changes: Changes, held: HoldingChanges) -> None:
        """Forget the labels this step may have changed. A named tensor reads by its variables and by
        the .grad / ._base pointers to it (``Holding.names``): a label moves where a variable moved,
        where a pointer was set or dropped, where a tensor became named or graph-only, and on from
        there along .grad / ._base (``w.grad`` reads by ``w``'s name: ``holding.chains_reach``). A
        tensor no variable reaches reads by its graph holders: ``reheld``, and the ``._base`` of a
        reheld view (``Holding.holders`` names it by the view's holder). A fact that changed only its
        values or version changes no label (an optimizer step: every parameter and its state)."""
        of = self.of
        if not of:
            return
        moved = list(held.named_flips)  # also reached from what moved them, below: kept, it costs little
        for name, old in changes.old_variables.items():
            moved += (old, state.variables.get(name))
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            if new is None:
                of.pop(tid, None)
            for fact in (old, new):
                if fact is not None:
                    moved += (fact.grad, fact.base)
        for tid in chains_reach(moved, state, changes):
            of.pop(tid, None)
        for tid in held.reheld:
            of.pop(tid, None)
            fact = state.tensors.get(tid)
            if fact is not None and fact.base is not None:
                of.pop(fact.base, None)


@dataclass(frozen=True)
class StepInput:
    index: int
    state: State  # everything alive after this step (shared, updated in place)
    changes: Changes  # what this step set or dropped, with the values before it
    holding: Holding  # names, holders and groups after this step
    held: HoldingChanges  # what this step changed about them
    users: StorageUsers  # storage -> the tensors using it, after this step
    labels: Labels = field(default_factory=Labels)

    def label(self, tid: str) -> str:
        """``names.label`` of a live tensor at this step, made once for every builder that asks (the
        memory rows and the facts panel's title name the same tensors) and for the steps after it
        until it may read differently (``Labels``)."""
        found = self.labels.of.get(tid)
        if found is None:
            found = self.labels.of[tid] = label(self.holding, tid)
        return found


class ViewBuilder(Protocol):
    def add_step(self, step: StepInput) -> None: ...


class Driver:
    """Feeds steps to builders one at a time, as they come (``drive`` feeds a whole trace; the page
    feeds a run's steps while the run goes on, ``app.web.streamed``)."""

    def __init__(self, builders: Iterable[ViewBuilder]) -> None:
        self.builders = list(builders)
        self.replay = HeldReplay()
        self.state, self.holding = self.replay.state, self.replay.holding
        self.users = StorageUsers()
        self.labels = Labels()

    @property
    def count(self) -> int:
        return self.replay.count

    def add(self, delta: DeltaStep) -> None:
        changes, held = self.replay.add(delta)
        state = self.state
        self.users.update(state, changes)
        self.labels.update(state, changes, held)
        step = StepInput(changes.index, state, changes, self.holding, held, self.users, self.labels)
        for builder in self.builders:
            builder.add_step(step)


def drive(trace: DeltaTrace, builders: Iterable[ViewBuilder]) -> int:
    """Feed every step to every builder, in order; returns the number of steps."""
    driver = Driver(builders)
    for delta in trace.steps:
        driver.add(delta)
    return driver.count
