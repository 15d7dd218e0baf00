"""Memory accounting per step: who keeps each storage alive.

A storage is held *through variables* when a named variable reaches it without going through a
graph node (the tensor itself, its ``.grad``, its ``._base``). Everything else the snapshot holds was
found through the autograd graph (tensors saved for backward, leaves of ``AccumulateGrad`` nodes no
variable names): those bytes are *held only by the graph* and disappear when the graph does.
Each storage is counted once, however many tensors use it. The definitions live in
``app.trace.holding``, which the memory view uses too; this module only reads its totals, one step
after the other, in time linear in the trace's changes.
"""

from __future__ import annotations

from app.schema import DeltaTrace, MemoryAccount, MemoryChange
from app.trace.holding import Holding, HoldingChanges
from app.trace.replay import Changes, State, replay

_NEW_CHANGE = MemoryChange.__pydantic_validator__.validate_python


class Accounting:
    """Holding's totals after each step, with the graph-only and shared sets given as changes: fed
    step by step by whoever replays the trace with a ``Holding`` (``account``, or the diagnostics
    index, which runs one anyway)."""

    def __init__(self) -> None:
        self.graph: set[str] = set()
        self.shared: set[str] = set()
        self.changes: list[MemoryChange] = []

    def add(self, holding: Holding, state: State, changes: Changes, held: HoldingChanges) -> None:
        touched = held.storage_flips | changes.old_storages.keys()
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            if old is not None and new is not None and old.storage == new.storage:
                continue  # on the same storage: its user count did not move, a flip is in storage_flips
            if old is not None and old.storage:
                touched.add(old.storage)
            if new is not None and new.storage:
                touched.add(new.storage)
        graph_added: list[str] = []
        graph_removed: list[str] = []
        shared_added: list[str] = []
        shared_removed: list[str] = []
        if touched:  # most steps of a loop touch no storage: nothing joins or leaves the two sets
            graph, shared = self.graph, self.shared
            graph_now = {s for s in touched if s in state.storages and not holding.storage_named(s)}
            shared_now = {s for s in touched if s in state.storages and holding.users.get(s, 0) >= 2}
            graph_added, graph_removed = sorted(graph_now - graph), sorted((touched & graph) - graph_now)
            shared_added = sorted(shared_now - shared)
            shared_removed = sorted((touched & shared) - shared_now)
            graph.difference_update(graph_removed)
            graph.update(graph_added)
            shared.difference_update(shared_removed)
            shared.update(shared_added)
        # Validated although they are our own numbers: pydantic's validator (in Rust) takes half the
        # time ``model_construct`` (in Python) does, and this runs once per step. Called directly, as
        # ``MemoryChange(**fields)`` calls it, without that Python frame (a third of the cost).
        self.changes.append(_NEW_CHANGE({
            "step": changes.index, "total_bytes": holding.total_bytes,
            "variable_bytes": holding.variable_bytes, "graph_bytes": holding.graph_bytes,
            "shared_bytes": holding.shared_bytes, "graph_added": graph_added, "graph_removed": graph_removed,
            "shared_added": shared_added, "shared_removed": shared_removed,
        }))


def account(trace: DeltaTrace) -> list[MemoryChange]:
    """The accounting of every step, with the graph-only and shared sets given as changes."""
    holding = Holding()
    accounting = Accounting()
    for state, changes in replay(trace):
        accounting.add(holding, state, changes, holding.update(state, changes))
    return accounting.changes


def as_accounts(changes: list[MemoryChange]) -> list[MemoryAccount]:
    """The v1 accounting (whole sets at every step) replayed from the changes."""
    graph: set[str] = set()
    shared: set[str] = set()
    accounts = []
    for change in changes:
        graph.difference_update(change.graph_removed)
        graph.update(change.graph_added)
        shared.difference_update(change.shared_removed)
        shared.update(change.shared_added)
        accounts.append(MemoryAccount(
            step=change.step, total_bytes=change.total_bytes, variable_bytes=change.variable_bytes,
            graph_bytes=change.graph_bytes, shared_bytes=change.shared_bytes,
            graph_storages=sorted(graph), shared_storages=sorted(shared),
        ))
    return accounts
