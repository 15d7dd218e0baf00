"""The autograd graph over the whole run, for questions about time: when each node was made and when it
went away, which nodes point at it (its parents) and which tensors have it as their ``grad_fn``, and
whether a backward pass ever ran it. Built once, lazily, from the index's histories, in time linear in
the nodes' and tensors' changes.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field
from operator import attrgetter

from app.diagnostics.context import Context
from app.trace.holding import ACCUMULATE_GRAD, short_node_name


@dataclass
class Lifetimes:
    born: dict[str, int] = field(default_factory=dict)  # node -> the step it appeared
    died: dict[str, float] = field(default_factory=dict)  # node -> the first step it is gone (inf: never)
    accumulators: set[str] = field(default_factory=set)  # AccumulateGrad nodes (a leaf's, long-lived)
    parents: dict[str, list[str]] = field(default_factory=dict)  # node -> nodes whose next lists it
    users: dict[str, list[str]] = field(default_factory=dict)  # node -> tensors that had it as grad_fn
    ran: dict[str, list[int]] = field(default_factory=dict)  # node -> backward steps that ran it
    by_birth: list[tuple[int, str]] = field(default_factory=list)  # (born, node), in order

    def alive(self, nid: str, step: int) -> bool:
        return self.born.get(nid, math.inf) <= step < self.died.get(nid, math.inf)

    def born_between(self, first: int, stop: int) -> list[str]:
        """Nodes made in steps [first, stop), in the order they were made."""
        lo = bisect_right(self.by_birth, (first, ""))
        hi = bisect_right(self.by_birth, (stop, ""))
        return [nid for _, nid in self.by_birth[lo:hi]]

    reached: dict[str, int] | None = None  # node -> the latest backward() line whose graph reaches it

    def ran_after(self, nid: str, step: int) -> bool:
        """A backward pass went through the node at a step after ``step``: a node step ran it, or (a
        trace without node steps) a later ``backward()`` line's root reaches it."""
        runs = self.ran.get(nid)
        if runs and runs[-1] > step:
            return True
        return self.reached is not None and self.reached.get(nid, -1) > step


def lifetimes(context: Context) -> Lifetimes:
    found = context.memo.get("lifetimes")
    if found is None:
        found = context.memo["lifetimes"] = _build(context)
        found.reached = _reached_by_backward(context)
    return found


def _reached_by_backward(context: Context) -> dict[str, int]:
    """Per node, the latest ``backward()`` / ``autograd.grad`` line whose root's graph reaches it. One
    sweep from the last such line back: what a later one reached is not entered again, so each node
    is visited once however many backward() calls reach it."""
    from app.diagnostics.flow import chains, tensors_under
    from app.diagnostics.trace import reach

    latest: dict[str, int] = {}
    entered: set[str] = set()
    steps = [k for k in range(len(context)) if (f := context.facts(k)) is not None and f.backwards]
    for k in reversed(steps):
        facts = context.facts(k)
        before = context.before(k)
        for backward in facts.backwards:  # type: ignore[union-attr]
            for root in backward.roots:  # ``loss``, or what ``y.sum()`` reads
                tids = [t for chain in chains(root) for t in tensors_under(before, chain, facts.func)]  # type: ignore[union-attr]
                for nid in reach(before, tids, skip=entered).nodes:
                    latest.setdefault(nid, k)
    return latest


_GRAD_FN = attrgetter("grad_fn")
_NO_NODE = frozenset({None})


def _build(context: Context) -> Lifetimes:
    timeline = context.index.timeline
    out = Lifetimes()
    born_at, died, parents = out.born, out.died, out.parents
    for nid, history in timeline.by_id("nodes").items():
        steps, values = history.steps, history.values
        # (most nodes change once or twice: made, then maybe dropped; their first value is the fact)
        fact = values[0]
        if fact is not None and len(values) <= 2:  # made, maybe dropped: no search for either
            born_at[nid] = steps[0]
            died[nid] = steps[1] if len(values) == 2 and values[1] is None else math.inf
        else:
            first = next((i for i, fact in enumerate(values) if fact is not None), None)
            if first is None:
                continue
            fact = values[first]
            born_at[nid] = steps[first]
            died[nid] = next((steps[i] for i in range(first + 1, len(values)) if values[i] is None), math.inf)
        name = fact.name
        if name.endswith(ACCUMULATE_GRAD) and short_node_name(name) == ACCUMULATE_GRAD:
            out.accumulators.add(nid)
        edges = fact.next
        for parent_of in (edges if len(edges) < 2 else dict.fromkeys(edges)):  # each once, in order
            if parent_of is not None:
                known = parents.get(parent_of)
                if known is None:
                    parents[parent_of] = [nid]
                else:
                    known.append(nid)
    out.by_birth = sorted((born, nid) for nid, born in born_at.items())
    users = out.users
    for tid, history in timeline.by_id("tensors").items():
        values = history.values
        if len(values) == 1:  # one fact all its life: its grad_fn, if any, once
            fact = values[0]
            if fact is not None and (grad_fn := fact.grad_fn) is not None:
                known = users.get(grad_fn)
                if known is None:
                    users[grad_fn] = [tid]
                else:
                    known.append(tid)
            continue
        # Each node it had once (a parameter's hundred versions: read at C speed). The order of these
        # nodes is no list's: each one's list gains ``tid`` once, in the order of the tensors.
        for grad_fn in set(map(_GRAD_FN, filter(None, values))) - _NO_NODE:
            users.setdefault(grad_fn, []).append(tid)
    for k, step in enumerate(context.trace.steps):
        if step.phase == "backward" and step.node is not None:
            out.ran.setdefault(step.node, []).append(k)
    return out
