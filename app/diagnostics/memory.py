"""Memory accounting per step: who keeps each storage alive.

A storage is held *through variables* when a named variable reaches it without going through a
graph node (the tensor itself, its ``.grad``, its ``._base``). Everything else the snapshot holds was
found through the autograd graph (tensors saved for backward, leaves of ``AccumulateGrad`` nodes no
variable names): those bytes are *held only by the graph* and disappear when the graph does.
Each storage is counted once, however many tensors use it.
"""

from __future__ import annotations

from collections import Counter

from app.diagnostics.trace import reach
from app.schema import MemoryAccount, RunResult, Step


def account_step(index: int, step: Step) -> MemoryAccount:
    through_variables = reach(step, tensors=step.variables.values(), graph=False).storages
    users = Counter(fact.storage for fact in step.tensors.values() if fact.storage is not None)
    sizes = {sid: fact.nbytes for sid, fact in step.storages.items()}
    graph_only = sorted(sid for sid in sizes if sid not in through_variables)
    shared = sorted(sid for sid, count in users.items() if count >= 2 and sid in sizes)
    return MemoryAccount(
        step=index,
        total_bytes=sum(sizes.values()),
        variable_bytes=sum(sizes[sid] for sid in through_variables if sid in sizes),
        graph_bytes=sum(sizes[sid] for sid in graph_only),
        shared_bytes=sum(sizes[sid] for sid in shared),
        graph_storages=graph_only,
        shared_storages=shared,
    )


def account(result: RunResult) -> list[MemoryAccount]:
    return [account_step(index, step) for index, step in enumerate(result.steps)]
