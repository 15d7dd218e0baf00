"""What to call each tensor of one step, and who keeps it alive.

A tensor is *named* when the user can reach it: a variable, or the ``.grad`` / ``._base`` of a named
tensor. Everything else in a step is there because the autograd graph holds it (a saved tensor, the
leaf behind an ``AccumulateGrad``), and is described by that holder instead.
"""

from __future__ import annotations

import re
from collections import deque

from app.schema import NodeFact, Step, TensorFact

ACCUMULATE_GRAD = "AccumulateGrad"
_BACKWARD = re.compile(r"Backward\d*$")


def short_node_name(name: str) -> str:
    """``torch::autograd::AccumulateGrad`` reads as ``AccumulateGrad``."""
    return name.rsplit("::", 1)[-1]


def is_accumulate(node: NodeFact) -> bool:
    return node.variable is not None or short_node_name(node.name) == ACCUMULATE_GRAD


def tensor_kind(fact: TensorFact, named: bool = True) -> str:
    """The legend's words, shared by both views: leaf / nonleaf / nograd, and held (by the graph)."""
    kind = ("leaf" if fact.is_leaf else "nonleaf") if fact.requires_grad else "nograd"
    return kind if named else kind + " held"


def tensor_names(step: Step) -> dict[str, list[str]]:
    """Every name by which the user reaches each tensor: variables first, then ``.grad``/``._base``."""
    names: dict[str, list[str]] = {}
    queue: deque[str] = deque()
    for name, tid in step.variables.items():
        if tid not in step.tensors:
            continue
        if tid not in names:
            queue.append(tid)
        names.setdefault(tid, []).append(name)
    while queue:
        tid = queue.popleft()
        fact = step.tensors[tid]
        owner = names[tid][0]
        for attribute, other in ((".grad", fact.grad), ("._base", fact.base)):
            if other is None or other not in step.tensors:
                continue
            if other not in names:
                queue.append(other)
            names.setdefault(other, []).append(owner + attribute)
    return names


def graph_holders(step: Step) -> dict[str, list[str]]:
    """For each tensor the graph holds: who holds it (``SinBackward0.self``, ``AccumulateGrad``)."""
    holders: dict[str, list[str]] = {}
    for node in step.nodes.values():
        short = short_node_name(node.name)
        if node.variable is not None:
            holders.setdefault(node.variable, []).append(short)
        for saved, tid in node.saved.items():
            if tid is not None:
                holders.setdefault(tid, []).append(f"{short}.{saved}")
    # A view the graph holds keeps its base's storage alive too.
    for tid in list(holders):
        fact = step.tensors.get(tid)
        if fact is not None and fact.base is not None and fact.base not in holders:
            holders[fact.base] = [f"{holders[tid][0]}._base"]
    return holders


def display_name(tid: str, names: dict[str, list[str]], holders: dict[str, list[str]]) -> str:
    """One short label: the user's names, else what holds it, else the id."""
    if tid in names:
        # all the user's own names for it; of derived ones (x.grad, x._base) the first is enough
        own = [n for n in names[tid] if not n.endswith((".grad", "._base"))]
        return ", ".join(own) if own else names[tid][0]
    if tid in holders:
        holder = holders[tid][0]
        if "." not in holder:  # an AccumulateGrad holds a leaf nobody names
            return "unnamed leaf"
        node, saved = holder.split(".", 1)
        op = _BACKWARD.sub("", node) or node
        return f"{saved} of {op}"  # "self of Sin": the chip "self" inside SinBackward0
    return tid


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
