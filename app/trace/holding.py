"""Who keeps each tensor alive: a name the user can reach, or only the autograd graph.

A tensor is **named** when a variable points at it, or it is the ``.grad`` or ``._base`` of a named
tensor (the user reaches it through that attribute). Every other tensor in a step is there because a
graph node holds it — a tensor saved for backward, the leaf behind an ``AccumulateGrad`` — and is
**held only by the graph**: it goes away with the graph. A storage is held through variables when a
named tensor uses it. This module is the one definition of that idea; the memory view groups its
strips by it and the memory accounting counts its bytes by it.

``Holding.update`` follows a replay step by step and touches only what the step changed (and the
few tensors whose ``.grad`` / ``._base`` chains hang off those), so a whole run costs time linear in
its changes. ``names_in(step)`` and ``holders_in(step)`` compute the same from one whole v1 ``Step``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

from app.schema import DeltaStep, NodeFact, Step, TensorFact
from app.trace.replay import Changes, State, apply

ACCUMULATE_GRAD = "AccumulateGrad"


def short_node_name(name: str) -> str:
    """``torch::autograd::AccumulateGrad`` reads as ``AccumulateGrad``."""
    return name.rsplit("::", 1)[-1]


def _edges(fact: TensorFact | None) -> tuple[str, ...]:
    """The tensors a user reaches *through* this one without the graph: its .grad and ._base."""
    if fact is None:
        return ()
    grad, base = fact.grad, fact.base  # spelled out: this runs for every touched tensor, every step
    if grad is None:
        return () if base is None else (base,)
    return (grad,) if base is None else (grad, base)


def node_holds(node: NodeFact) -> list[tuple[str, str]]:
    """(tensor id, role) for every tensor a node keeps alive: ``AccumulateGrad``, ``SinBackward0.self``."""
    short = short_node_name(node.name)
    held = [(node.variable, short)] if node.variable is not None else []
    held += [(tid, f"{short}.{saved}") for saved, tid in node.saved.items() if tid is not None]
    return held


class HoldingChanges:
    """What one step changed about holding. (A plain class, as ``Changes``: one is made a step.)"""

    __slots__ = ("named_flips", "reheld", "renamed", "storage_flips")

    def __init__(self) -> None:
        self.renamed: set[str] = set()  # tensors whose names may read differently now
        self.named_flips: set[str] = set()  # tensors that became named or graph-only
        self.storage_flips: set[str] = set()  # storages that switched group
        self.reheld: set[str] = set()  # tensors whose graph holders changed


class Holding:
    """The named set, each tensor's names and holders, and each storage's group, kept per step."""

    def __init__(self) -> None:
        self.state: State | None = None
        self.own: dict[str, dict[str, None]] = {}  # tensor -> its variable names (ordered set)
        self.pointers: dict[str, set[str]] = {}  # tensor -> tensors whose .grad/._base it is
        self.named: set[str] = set()
        self.named_on: dict[str, int] = {}  # storage -> how many named tensors use it
        self.users: dict[str, int] = {}  # storage -> how many tensors use it
        self.held_by: dict[str, dict[str, list[str]]] = {}  # tensor -> node -> roles
        # What each storage adds to the byte totals now: (nbytes, named, shared).
        self._counted: dict[str, tuple[int, bool, bool]] = {}
        self._touched: set[str] = set()
        self.total_bytes = 0
        self.variable_bytes = 0
        self.shared_bytes = 0

    # ---- queries -------------------------------------------------------------------------------
    def is_named(self, tid: str) -> bool:
        return tid in self.named

    def storage_named(self, sid: str) -> bool:
        return self.named_on.get(sid, 0) > 0

    def names(self, tid: str) -> list[str]:
        """Every name the user reaches ``tid`` by: its variables, then ``owner.grad`` / ``owner._base``."""
        names = list(self.own.get(tid, ()))
        if tid not in self.named or self.state is None:
            return names
        derived = []
        for owner in sorted(self.pointers.get(tid, ()), key=_id_order):
            if owner not in self.named:
                continue
            fact = self.state.tensors[owner]
            first = self.first_name(owner)
            if first is None:
                continue
            if fact.grad == tid:
                derived.append(first + ".grad")
            if fact.base == tid:
                derived.append(first + "._base")
        return names + derived

    def first_name(self, tid: str, _seen: frozenset[str] = frozenset()) -> str | None:
        own = self.own.get(tid)
        if own:
            return next(iter(own))
        if tid in _seen or self.state is None:
            return None
        for owner in sorted(self.pointers.get(tid, ()), key=_id_order):
            if owner in self.named and (first := self.first_name(owner, _seen | {tid})) is not None:
                fact = self.state.tensors[owner]
                return first + (".grad" if fact.grad == tid else "._base")
        return None

    def holders(self, tid: str) -> list[str]:
        """Who in the graph holds ``tid`` (``SinBackward0.self``), or holds a view of it (``…._base``)."""
        roles = [role for node_roles in self.held_by.get(tid, {}).values() for role in node_roles]
        if roles or self.state is None:
            return roles
        for view in sorted(self.pointers.get(tid, ()), key=_id_order):
            fact = self.state.tensors.get(view)
            if fact is not None and fact.base == tid and (held := self.held_by.get(view)):
                return [next(iter(held.values()))[0] + "._base"]
        return []

    def first_holder(self, tid: str) -> str | None:
        """``holders(tid)[0]``, without listing every holder (a weight a thousand graphs saved)."""
        for node_roles in self.held_by.get(tid, {}).values():
            return node_roles[0]
        holders = self.holders(tid)
        return holders[0] if holders else None

    # ---- the step-by-step update ---------------------------------------------------------------
    def update(self, state: State, changes: Changes) -> HoldingChanges:
        self.state = state
        out = HoldingChanges()
        dirty: set[str] = set()
        for name, old in changes.old_variables.items():
            new = state.variables.get(name)
            if old == new:
                continue
            if old is not None and old in self.own:
                self.own[old].pop(name, None)
                if not self.own[old]:
                    del self.own[old]
                dirty.add(old)
            if new is not None:
                self.own.setdefault(new, {})[name] = None
                dirty.add(new)
        quiet: list[str] = []  # set anew on the same storage, .grad and ._base (a version, its values)
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            if (old is not None and new is not None and old.storage == new.storage and old.grad == new.grad
                    and old.base == new.base):
                quiet.append(tid)  # nothing that decides holding moved: only its names are reported
                continue
            dirty.add(tid)
            for target in _edges(old):
                self.pointers.get(target, set()).discard(tid)
                dirty.add(target)
            for target in _edges(new):
                self.pointers.setdefault(target, set()).add(tid)
                dirty.add(target)
            self._count_user(old, -1)
            self._count_user(new, +1)
        for nid, old in changes.old_nodes.items():
            new = state.nodes.get(nid)
            for tid, _ in node_holds(old) if old is not None else ():
                roles = self.held_by.get(tid)
                if roles is not None and roles.pop(nid, None) is not None:
                    out.reheld.add(tid)
                    if not roles:
                        del self.held_by[tid]
            for tid, role in node_holds(new) if new is not None else ():
                self.held_by.setdefault(tid, {}).setdefault(nid, []).append(role)
                out.reheld.add(tid)
        self._touched.update(changes.old_storages)
        self._reclassify(dirty, state, changes, out)
        if quiet:
            # Reported as the tensors it reaches are (a whole reclassification would find every one of
            # them named as before: their own names, pointers and storages did not move).
            out.renamed |= chains_reach(quiet, state, changes)
        for sid in self._touched:
            self._recount(sid, state, out)
        self._touched.clear()
        return out

    def _count_user(self, fact: TensorFact | None, delta: int) -> None:
        if fact is None or fact.storage is None:
            return
        sid = fact.storage
        after = self.users.get(sid, 0) + delta
        if after:
            self.users[sid] = after
        else:
            self.users.pop(sid, None)
        self._touched.add(sid)

    def _recount(self, sid: str, state: State, out: HoldingChanges) -> None:
        """Replace what ``sid`` adds to the byte totals with what it adds after this step."""
        storage = state.storages.get(sid)
        old_size, old_named, old_shared = self._counted.pop(sid, (0, False, False))
        size = storage.nbytes if storage is not None else 0
        named = storage is not None and self.named_on.get(sid, 0) > 0
        shared = storage is not None and self.users.get(sid, 0) >= 2
        self.total_bytes += size - old_size
        self.variable_bytes += (size if named else 0) - (old_size if old_named else 0)
        self.shared_bytes += (size if shared else 0) - (old_size if old_shared else 0)
        if storage is not None:
            self._counted[sid] = (size, named, shared)
        if named != old_named:
            out.storage_flips.add(sid)

    @property
    def graph_bytes(self) -> int:
        """Bytes of storages no named tensor uses: held only by the graph."""
        return self.total_bytes - self.variable_bytes

    def graph_storages(self) -> list[str]:
        """Storages held only by the graph now (O(storages): for a v1 answer or a test)."""
        return sorted(sid for sid, (_, named, _) in self._counted.items() if not named)

    def shared_storages(self) -> list[str]:
        return sorted(sid for sid, (_, _, shared) in self._counted.items() if shared)

    def _reclassify(self, dirty: set[str], state: State, changes: Changes, out: HoldingChanges) -> None:
        """Recompute the named status of every tensor whose support may have changed (least fixpoint
        restricted to the dirty tensors and what their .grad/._base chains reach)."""
        if not dirty:
            return  # a step that set, dropped and renamed no tensor: nothing to recompute
        affected = chains_reach(dirty, state, changes)
        was = {tid for tid in affected if tid in self.named}
        self.named -= affected
        frontier = deque(tid for tid in affected if tid in state.tensors and self._supported(tid))
        now: set[str] = set()
        while frontier:
            tid = frontier.popleft()
            if tid in now or tid not in state.tensors:
                continue
            now.add(tid)
            self.named.add(tid)
            frontier.extend(t for t in _edges(state.tensors[tid]) if t in affected)
        for tid in affected:
            old_fact, new_fact = changes.old_tensors.get(tid), state.tensors.get(tid)
            if old_fact is None and tid not in changes.old_tensors:
                old_fact = new_fact  # untouched fact: only its named status can have moved
            old_sid = old_fact.storage if old_fact is not None else None
            new_sid = new_fact.storage if new_fact is not None else None
            if tid in was:
                self._count_named(old_sid, -1, out)
            if tid in now:
                self._count_named(new_sid, +1, out)
            if (tid in was) != (tid in now):
                out.named_flips.add(tid)
        out.renamed |= affected

    def _supported(self, tid: str) -> bool:
        """Named by a variable, or the .grad/._base of a tensor already known to be named."""
        return bool(self.own.get(tid)) or not self.named.isdisjoint(self.pointers.get(tid, ()))

    def _count_named(self, sid: str | None, delta: int, out: HoldingChanges) -> None:
        if sid is None:
            return
        after = self.named_on.get(sid, 0) + delta
        if after:
            self.named_on[sid] = after
        else:
            self.named_on.pop(sid, None)
        self._touched.add(sid)


class HeldReplay:
    """A delta trace replayed one step at a time with its ``Holding`` kept up to date: where every
    reader of a trace (the diagnostics index, the views' ``Driver``) starts each step from."""

    def __init__(self) -> None:
        self.state = State()
        self.holding = Holding()
        self.count = 0

    def add(self, delta: DeltaStep) -> tuple[Changes, HoldingChanges]:
        """Move past the next step: what it changed, and what that changed about holding."""
        changes = Changes(self.count, delta)
        apply(self.state, delta, changes)
        held = self.holding.update(self.state, changes)
        self.count += 1
        return changes, held


def chains_reach(start: Iterable[str | None], state: State, changes: Changes) -> set[str]:
    """``start`` and every tensor their .grad/._base chains reach, now or before the step (``None``
    in ``start`` is passed over)."""
    found: set[str] = set()
    queue = deque(start)
    while queue:
        tid = queue.popleft()
        if tid is None or tid in found:
            continue
        found.add(tid)
        queue.extend(_edges(state.tensors.get(tid)))
        queue.extend(_edges(changes.old_tensors.get(tid)))
    return found


def _id_order(ident: str) -> tuple[int, str]:
    digits = ident[1:]
    return (int(digits), ident) if digits.isdigit() else (0, ident)


# ---- the same questions of one whole v1 step (for tests, and consumers of v1) --------------------
def names_in(step: Step) -> dict[str, list[str]]:
    """Every name by which the user reaches each tensor of one step: variables first, then
    ``.grad``/``._base`` of named tensors (breadth first)."""
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


def holders_in(step: Step) -> dict[str, list[str]]:
    """For each tensor the graph holds in one step: who holds it (``SinBackward0.self``)."""
    holders: dict[str, list[str]] = {}
    for node in step.nodes.values():
        for tid, role in node_holds(node):
            holders.setdefault(tid, []).append(role)
    for tid in list(holders):
        fact = step.tensors.get(tid)
        if fact is not None and fact.base is not None and fact.base not in holders:
            holders[fact.base] = [f"{holders[tid][0]}._base"]
    return holders


def named_storages(step: Step, roots: Iterable[str] | None = None) -> set[str]:
    """Storages the user reaches from variables (or ``roots``) without the graph, in one v1 step."""
    seen: set[str] = set()
    found: set[str] = set()
    queue = deque(step.variables.values() if roots is None else roots)
    while queue:
        tid = queue.popleft()
        fact = step.tensors.get(tid)
        if tid in seen or fact is None:
            continue
        seen.add(tid)
        if fact.storage is not None:
            found.add(fact.storage)
        queue.extend(_edges(fact))
    return found
