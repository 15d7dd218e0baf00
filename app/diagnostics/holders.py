"""Who holds the graphs of earlier loop iterations, read from the trace (``rules/held/`` words them).

For each run of a loop (``app.diagnostics.loops``), the graph nodes made in an iteration that are still
alive when the run ends, one whole iteration later at least, are *held*: a name reaches them through
graph edges made iterations ago. A run holds graphs when the first iteration's are still there and
more than one iteration's are — a window that keeps the last two losses is bounded and passes; a list
of every loss does not. Unless a ``backward()`` after the loop goes through them (an unrolled sequence
trained once at the end): then they were kept to be used.

Who holds them is found from the held nodes upwards (to the nodes that point at them, the tensors
whose ``grad_fn`` they are, the nodes that saved those tensors): every name that reaches them is a
candidate *cause* — a container that gains an item every iteration, or a name built from its own
previous value; a name merely computed from such a value (``loss`` of ``loss = head(h)``) is not.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

from app.diagnostics.context import Context
from app.diagnostics.index import At, container_of, part_of
from app.diagnostics.lifetimes import Lifetimes
from app.diagnostics.loops import LoopRun
from app.diagnostics.source import expr_keys
from app.diagnostics.trace import names_of, reach


def bare(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


@dataclass
class Cause:
    """One name (a container, or a variable) that holds graphs of earlier iterations."""

    key: str  # the container ``losses`` / ``h``, or the variable ``total``
    run: LoopRun
    holders: list[str] = field(default_factory=list)  # tensors it holds them through (at the run's end)
    nodes: set[str] = field(default_factory=set)  # the held nodes it reaches


def held_nodes(life: Lifetimes, run: LoopRun) -> list[str]:
    """Graph nodes made before the run's last iteration that are still alive at its end (a leaf's
    ``AccumulateGrad`` aside: it lives as long as its leaf), in the order they were made."""
    bounds = run.bounds()
    if len(bounds) < 3:
        return []
    last, accumulators, died = run.last, life.accumulators, life.died  # (``Lifetimes.alive``, inline:
    # every node of the run is asked, and each was born before ``last``)
    return [nid for nid in life.born_between(bounds[0], bounds[-3])
            if nid not in accumulators and last < died.get(nid, math.inf)]


def growing_held(life: Lifetimes, run: LoopRun) -> list[str]:
    """``held_nodes`` when they show growth: the first iteration's among them, and (when more than
    one iteration can be checked) more than one iteration's."""
    checked = len(run.starts) - 2  # iterations [0, checked) had a whole iteration after them
    held = held_nodes(life, run)
    if not held:
        return []
    # Made in order: the first iteration's among them when the first was, another's when the last was.
    second = run.starts[1] if len(run.starts) > 1 else math.inf
    if life.born[held[0]] >= second or (checked > 1 and life.born[held[-1]] < second):
        return []
    if any(life.ran_after(nid, run.last) for nid in held):
        return []  # a backward() after the loop goes through them: kept to be used
    return held


def causes(context: Context, life: Lifetimes, run: LoopRun) -> list[Cause]:
    held = growing_held(life, run)
    if not held:
        return []
    view = context.at(run.last)
    tensor, node = view.reader("tensors"), view.reader("nodes")  # (this walk reads every held node)
    users, parents = life.users, life.parents
    found: dict[str, Cause] = {}
    holding: dict[str, set[str]] = {}  # cause key -> its holders (``Cause.holders``: in the order found)
    seen: set[str] = set()
    queue = list(held)  # nodes to visit: the held nodes, then what points at them
    while queue:
        nid = queue.pop()
        if nid in seen:
            continue
        seen.add(nid)
        for tid in users.get(nid, ()):
            fact = tensor(tid)
            if fact is None or fact.grad_fn != nid:
                continue
            if view.name_count(tid):
                key = cause_key(view, tid)
                known = holding.get(key)
                if known is None:
                    found[key], known = Cause(key, run), holding.setdefault(key, set())
                if tid not in known:
                    known.add(tid)
                    found[key].holders.append(tid)
            queue.extend(saver for saver, _name in view.savers(tid))
        queue.extend(parent for parent in parents.get(nid, ()) if node(parent))
    found = lifted(context, run, found)
    for cause in found.values():
        cause.nodes = reached(view, cause.holders, set(held))
    causes = [cause for cause in found.values() if cause.nodes]
    # A name rebuilt every iteration from something else that carries the graph (``out`` of
    # ``out, h = rnn(x, h)``) reaches the held nodes only through that something: not a cause.
    own = [c for c in causes if grows(context, c) or self_linked(context, c)]
    covered = set().union(*(c.nodes for c in own)) if own else set()
    return own + [c for c in causes if c not in own and not c.nodes <= covered]


def reads_itself(context: Context, step: int, old: str) -> bool:
    """The statement of ``step`` reads a name the old value had (``h`` in ``out, h = rnn(x, h)``; not
    ``out``, which the same node also made)."""
    facts = context.facts(step)
    if facts is None or facts.node is None:
        return False
    names = {bare(n) for n in context.before(step).names(old)}
    names |= {c for n in names if (c := container_of(n)) is not None}  # ``h`` for ``h[0]``
    tails = {n.split(".", 1)[1] for n in names if "." in n}  # ``model.h`` is ``self.h`` in its method
    for node in ast.walk(facts.node):
        if isinstance(node, ast.Name | ast.Attribute | ast.Subscript) and isinstance(node.ctx, ast.Load):
            keys = set(expr_keys(node))
            if names & keys or any(k.startswith("self.") and k[5:] in tails for k in keys):
                return True
    return isinstance(facts.node, ast.AugAssign)


def grows(context: Context, cause: Cause) -> bool:
    return key_grows(context, cause.run, cause.key)


def key_grows(context: Context, run: LoopRun, key: str) -> bool:
    """The container ``key`` holds more tensors at the run's end than after its first iteration."""
    before, after = key_counts(context, run, key)
    return after > before


def key_counts(context: Context, run: LoopRun, key: str) -> tuple[int, int]:
    """How many tensors the container ``key`` holds after the run's first iteration and at its end."""
    if not item_keys(context, key):
        return 0, 0
    # counted from the second iteration on: a tuple state is None before the first
    since = run.starts[1] if len(run.starts) > 1 else run.starts[0]
    return len(context.at(since).keys(key)), len(context.at(run.last).keys(key))


def parts_above(key: str) -> list[str]:
    """What ``key`` is a part of, innermost first: ``kept[3]``, ``kept`` for ``kept[3].loss``."""
    out: list[str] = []
    part = part_of(key)
    while part is not None:
        out.append(part)
        part = part_of(part)
    return out


def lifted(context: Context, run: LoopRun, found: dict[str, Cause]) -> dict[str, Cause]:
    """The causes, each filed under the container that gains an item every iteration when the name
    found is only a part of one of its items: ``kept`` for the tuple ``kept[3]`` of
    ``kept.append((loss, i))``, ``kept`` for ``kept[3].loss`` (a list, dict or set of tuples, lists,
    dicts or namedtuples). Read as a cause of its own, each item was a false finding per iteration (a
    tuple does not grow, or grows from nothing as it is made). The container is the innermost part
    above that gains items in the run and held some before it; else the innermost that grows.
    (``hist['loss']`` of ``hist['loss'].append(loss)`` itself gains items: it stays.)"""
    memo: dict[str, tuple[int, int]] = {}

    def counts(key: str) -> tuple[int, int]:
        if key not in memo:
            memo[key] = key_counts(context, run, key)
        return memo[key]

    def adds_to(key: str) -> bool:  # gains items in the run, and held some before (not one of its items)
        before, after = counts(key)
        return 0 < before < after

    out: dict[str, Cause] = {}
    holding: dict[str, set[str]] = {}
    for key, cause in found.items():
        into = key
        if not adds_to(key):
            outer = [part for part in parts_above(key) if counts(part)[1] > counts(part)[0]]  # they grow
            into = next((part for part in outer if adds_to(part)), outer[0] if outer else key)
        known = out.get(into)
        if known is None:
            out[into], holding[into] = Cause(into, run, list(cause.holders)), set(cause.holders)
        else:
            new = [t for t in cause.holders if t not in holding[into]]
            known.holders.extend(new)
            holding[into].update(new)
    return out


def values_of(context: Context, cause: Cause) -> list[tuple[str, list[tuple[int, str, str | None]]]]:
    """Per key of the cause (the name, or a tuple's items): its successive values in the run, as
    (step it was made, tensor, the value it replaced). A value is dated by when the tensor was made,
    not when the name was seen bound to it: inside a method, ``self.h = ...`` makes it before the
    caller's ``model.h`` shows it."""
    timeline, run = context.index.timeline, cause.run
    out = []
    for key in item_keys(context, cause.key) or [cause.key]:
        seen: list[tuple[int, str, str | None]] = []
        previous: str | None = None
        for step, tid in timeline.changes_of("variables", key):
            if tid is None or tid == previous:
                continue
            made = context.first_seen(tid)
            made = step if made is None or made > step else made
            if run.starts[0] <= made < run.stop:
                seen.append((made, tid, previous))
            previous = tid
        out.append((key, seen))
    return out


def self_linked(context: Context, cause: Cause) -> bool:
    """One of the name's values in the run leads back, through the graph, to the value it replaced, and
    the statement that made it reads that value: it is built from itself. The search only enters
    nodes made since the old value's ``grad_fn``: about one iteration's graph."""
    for _key, values in values_of(context, cause):
        for made, tid, old in reversed(values[-3:]):
            if old is not None and linked(context, made, tid, old) and reads_itself(context, made, old):
                return True
        for step in in_place(context, cause)[-3:]:  # rebuilt in place (``total += loss`` on a tensor)
            for tid in tids(context, cause, step):
                fact, old = context.at(step).tensor(tid), context.before(step).tensor(tid)
                if fact is not None and old is not None and old.grad_fn and fact.grad_fn != old.grad_fn \
                        and leads_back(context, step, tid, old.grad_fn):
                    return True
    return False


def linked(context: Context, step: int, tid: str, old: str) -> bool:
    """The tensor ``tid`` made at ``step`` leads back to the ``grad_fn`` of ``old``, the value it replaced."""
    old_fact = context.before(step).tensor(old) or context.at(step).tensor(old)
    if old_fact is None or old_fact.grad_fn is None:
        return False
    return leads_back(context, step, tid, old_fact.grad_fn)


def leads_back(context: Context, step: int, tid: str, grad_fn: str) -> bool:
    """``tid`` reaches the node ``grad_fn`` through the graph at ``step``, searching only the nodes made
    since ``grad_fn`` was."""
    floor = context.first_seen(grad_fn) or 0
    return grad_fn in reach(context.at(step), [tid], floor=floor, until=grad_fn).nodes


def tids(context: Context, cause: Cause, step: int) -> list[str]:
    view = context.at(step)
    return [t for k in item_keys(context, cause.key) or [cause.key] if (t := view.variable(k)) is not None]


def in_place(context: Context, cause: Cause) -> list[int]:
    """Steps of the run at which the name's tensor got a new ``grad_fn`` where it stands."""
    timeline, run = context.index.timeline, cause.run
    steps: set[int] = set()
    for key in item_keys(context, cause.key) or [cause.key]:
        for tid in {t for _s, t in timeline.changes_of("variables", key) if t is not None}:
            previous = None
            for step, fact in timeline.changes_of("tensors", tid):
                fn = fact.grad_fn if fact is not None else None
                inside = run.starts[0] <= step < run.stop
                if inside and previous is not None and fn is not None and fn != previous \
                        and timeline.variable(key, step) == tid:
                    steps.add(step)
                previous = fn
    return sorted(steps)


def reached(view: At, holders: list[str], held: set[str]) -> set[str]:
    """The held nodes the holders reach (walking down from them, through held nodes only)."""
    tensor, node_at = view.reader("tensors"), view.reader("nodes")
    out: set[str] = set()
    queue = [fact.grad_fn for tid in holders if (fact := tensor(tid)) is not None and fact.grad_fn]
    seen: set[str] = set()
    while queue:
        nid = queue.pop()
        if nid is None or nid in seen:
            continue
        seen.add(nid)
        node = node_at(nid)
        if node is None:
            continue
        if nid in held:
            out.add(nid)
        queue.extend(node.next)  # (None among them: passed over as it comes off the queue)
        for tid in node.saved.values():
            fact = tensor(tid)
            if fact is not None and fact.grad_fn is not None:
                queue.append(fact.grad_fn)
    return out


def cause_key(view: At, tid: str) -> str:
    names = sorted(names_of(view, tid), key=lambda n: (":" in n, len(n), n))
    name = names[0]
    return container_of(name) or name


# ---- what each cause did, step by step ---------------------------------------------------------------

def item_keys(context: Context, container: str) -> list[str]:
    return context.index.item_keys(container)


def add_steps(context: Context, cause: Cause) -> list[int]:
    """Steps of the run at which the container gained an item."""
    run, timeline = cause.run, context.index.timeline
    steps = set()
    for key in item_keys(context, cause.key):
        for step, tid in timeline.changes_of("variables", key):
            if tid is not None and run.starts[0] <= step < run.stop:
                steps.add(step)
    return sorted(steps)


def change_steps(context: Context, cause: Cause) -> list[int]:
    """Steps of the run at which the name (or, for a tuple, one of its items) got a new value: made
    anew, or its tensor given a new ``grad_fn`` in place (``total += loss`` on a tensor)."""
    steps = {made for _key, values in values_of(context, cause) for made, _tid, _old in values}
    steps.update(in_place(context, cause))
    forward = context.trace.steps
    return sorted(s for s in steps if forward[s].phase == "forward")


def growth_per_iteration(context: Context, steps: list[int]) -> tuple[float, int, int] | None:
    """(bytes per iteration, first step, last step), read from the memory chart at the steps the
    cause acted at (the same point of consecutive iterations); the first is skipped when there are
    enough (the first iteration also makes what every later one reuses: an optimizer's state)."""
    changes = context.memory
    points = steps[1:] if len(steps) >= 3 else steps
    if len(points) < 2 or points[-1] >= len(changes):
        return None
    first, last = points[0], points[-1]
    return (changes[last].total_bytes - changes[first].total_bytes) / (len(points) - 1), first, last
