"""Questions about a validated trace that several rules ask: who reaches what, what changed, names.

Pure functions over ``app.schema`` models; no torch. "Reach" follows the same edges the engine
followed to find tensors: variable → tensor → ``.grad`` / ``._base`` / ``grad_fn`` → node →
``next`` / ``variable`` / ``saved``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.schema import Step

ACCUMULATE_GRAD = "AccumulateGrad"
FREED_MARK = "backward through the graph a second time"
MODIFIED_MARK = "modified by an inplace operation"


@dataclass
class Reach:
    tensors: set[str] = field(default_factory=set)
    storages: set[str] = field(default_factory=set)
    nodes: set[str] = field(default_factory=set)


def reach(step: Step, tensors: Iterable[str] = (), nodes: Iterable[str] = (), *, graph: bool = True) -> Reach:
    """Everything kept alive by the given tensors and nodes; ``graph=False`` stops at grad_fn edges."""
    found = Reach()
    tensor_queue = deque(t for t in tensors if t in step.tensors)
    node_queue = deque(n for n in nodes if n in step.nodes)
    while tensor_queue or node_queue:
        while tensor_queue:
            tid = tensor_queue.popleft()
            if tid in found.tensors or tid not in step.tensors:
                continue
            found.tensors.add(tid)
            fact = step.tensors[tid]
            if fact.storage is not None:
                found.storages.add(fact.storage)
            tensor_queue.extend(t for t in (fact.grad, fact.base) if t is not None)
            if graph and fact.grad_fn is not None:
                node_queue.append(fact.grad_fn)
        while node_queue:
            nid = node_queue.popleft()
            if nid in found.nodes or nid not in step.nodes:
                continue
            found.nodes.add(nid)
            node = step.nodes[nid]
            node_queue.extend(n for n in node.next if n is not None)
            if node.variable is not None:
                tensor_queue.append(node.variable)
            tensor_queue.extend(t for t in node.saved.values() if t is not None)
    return found


def leaves_reached(step: Step, tid: str) -> set[str]:
    """Leaf tensors whose ``AccumulateGrad`` a backward from ``tid`` would reach."""
    fact = step.tensors.get(tid)
    if fact is None:
        return set()
    if fact.grad_fn is None:
        return {tid} if fact.requires_grad else set()
    nodes = reach(step, nodes=[fact.grad_fn]).nodes
    return {step.nodes[n].variable for n in nodes if step.nodes[n].variable is not None}  # type: ignore[misc]


def names_of(step: Step, tid: str) -> list[str]:
    """Variable names that point at ``tid`` (plain names first)."""
    names = [name for name, target in step.variables.items() if target == tid]
    return sorted(names, key=lambda n: (("[" in n or "." in n or ":" in n), len(n), n))


def label(step: Step, tid: str) -> str:
    """How a message names a tensor: its variable name, else what keeps it alive."""
    names = names_of(step, tid)
    if names:
        name = names[0] if len(names[0]) <= 80 else names[0][:79] + "…"
        return f"`{name}`"
    return f"a tensor only the graph holds ({tid})"


def version_bumps(before: Step, after: Step) -> set[str]:
    """Tensors alive in both steps whose version counter went up: written in place in between."""
    bumped = set()
    for tid, fact in after.tensors.items():
        old = before.tensors.get(tid)
        if old is not None and (fact.version or 0) > (old.version or 0):
            bumped.add(tid)
    return bumped


def detached_from(step: Step, tid: str) -> list[str]:
    """The tensors that require grad and share ``tid``'s memory, when ``tid`` itself is cut off.

    A ``detach()`` or ``.data`` result shares its original's storage but does not require grad,
    has no ``grad_fn`` and no ``_base``: the shape of an alias autograd cannot see through.
    """
    fact = step.tensors.get(tid)
    if fact is None or fact.storage is None or fact.requires_grad or fact.grad_fn or fact.base:
        return []
    if step.storages.get(fact.storage) is None or step.storages[fact.storage].nbytes == 0:
        return []
    return [
        other
        for other, o in step.tensors.items()
        if other != tid and o.storage == fact.storage and o.requires_grad
    ]


def saved_by(step: Step, storage: str) -> list[tuple[str, str, str]]:
    """(node, saved name, tensor) for every live saved tensor that uses ``storage``."""
    found = []
    for nid, node in step.nodes.items():
        for name, tid in node.saved.items():
            if tid is not None and tid in step.tensors and step.tensors[tid].storage == storage:
                found.append((nid, name, tid))
    return found


def node_label(name: str) -> str:
    return name.removeprefix("torch::autograd::")


def fmt_bytes(n: int) -> str:
    """``1,234 bytes`` below 10 KiB, else KiB/MiB with one decimal."""
    if n < 10 * 1024:
        return f"{n:,} bytes"
    if n < 10 * 1024 * 1024:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / (1024 * 1024):,.1f} MiB"
