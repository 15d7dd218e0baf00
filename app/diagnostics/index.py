"""Everything the rules ask of a trace, built in one replay of its deltas, and read step by step.

The rules ask questions such as "which names did tensor t have at step 40", "which tensors used
storage s then", "who saved it", "how many live facts point at this node". Answering them by
scanning whole steps costs steps × live tensors (a 1,000-iteration leak: quadratic). ``Index``
instead follows ``app.trace.replay`` once and keeps, for every key, the *spans* of steps during which
each member belonged to it (``Relation``) and the history of every per-id value (``Series``,
``Counts``; all three in ``app.diagnostics.histories``), so a question costs the history of the ids
it names, never a scan of a step. ``At`` is one step seen through those histories; every rule reads
the trace only through it (``Index.reads`` counts the facts and spans it touched: the tests use it to
prove the work grows linearly with the trace).

Who keeps a tensor alive (named vs held only by the graph) is ``app.trace.holding.Holding``'s
definition: the index runs it and records, for the tensors each step touched, how a message can name
them when no variable does.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable
from itertools import count
from typing import Any

from app.budget import current_budget
from app.diagnostics.histories import Counts, Reads, Relation, Series
from app.diagnostics.memory import Accounting
from app.schema import DeltaStep, DeltaTrace, NodeFact, StorageFact, TensorFact
from app.trace.holding import HeldReplay, Holding, HoldingChanges
from app.trace.replay import Changes, State, Timeline

MODIFIED_MARK = "modified by an inplace operation"


def container_of(key: str) -> str | None:
    """``losses`` for ``losses[3]``, ``hist['loss']`` for ``hist['loss'][0]``, ``kept`` for
    ``kept{3}`` (a set's member, app.engine.labels); None for a plain name."""
    if key.endswith("}") and "{" in key:
        return key[: key.rindex("{")]
    if not key.endswith("]") or "[" not in key:
        return None
    return key[: key.rindex("[")]


def part_of(key: str) -> str | None:
    """The value a key is a part of: its container (``container_of``), or, for a field of a
    container's item (``kept[3].loss``: a namedtuple or an object kept in a list), that item
    (``kept[3]``). A plain object's attribute (``model.h``) is part of nothing: an object is not a
    container that gains items."""
    container = container_of(key)
    if container is not None:
        return container
    owner = key[: key.rindex(".")] if "." in key else ""
    return owner if owner.endswith(("]", "}")) else None


def head_of(key: str) -> tuple[str | None, str]:
    """(function, head name) of a variable key: ``f:x.w[0]`` → ("f", "x"), ``m.fc.weight`` → (None, "m")."""
    prefix, local = key.split(":", 1) if ":" in key else (None, key)
    return prefix, local.split(".", 1)[0].split("[", 1)[0].split("{", 1)[0]


def tensor_edges(fact: TensorFact | None) -> list[str]:
    """What a tensor keeps alive, as ``reach`` follows it: its .grad, ._base and grad_fn."""
    if fact is None:
        return []
    out = []  # spelled out: this runs twice for every touched tensor, every step
    if fact.grad is not None:
        out.append(fact.grad)
    if fact.base is not None:
        out.append(fact.base)
    if fact.grad_fn is not None:
        out.append(fact.grad_fn)
    return out


def node_edges(node: NodeFact | None) -> list[str]:
    """What a node keeps alive: the nodes of ``next``, its leaf and the tensors it saved."""
    if node is None:
        return []
    out = [n for n in node.next if n is not None]
    if node.variable is not None:
        out.append(node.variable)
    out.extend(t for t in node.saved.values() if t is not None)
    return out


class Index:
    """The histories of one trace (see the module docstring). Built in one pass over the deltas."""

    @property
    def reads(self) -> int:
        """Facts the rules read so far (the linear-time tests count them)."""
        return self._reads.count

    @reads.setter
    def reads(self, count: int) -> None:
        self._reads.count = count

    def __init__(self, trace: DeltaTrace, *, accounting: Accounting | None = None, fed: bool = False) -> None:
        """``fed``: the caller replays the trace and hands every step to ``add`` (with the ``Holding``
        it keeps), then calls ``finish`` — the page builds its views in that same replay — instead
        of the index replaying it here."""
        self.trace = trace
        self.accounting = accounting  # fed from the same replay and Holding, when given
        self._reads = Reads()
        self.timeline = Timeline()  # fed step by step in ``add``
        self.lines = self.timeline.lines
        self.names = Relation(self._reads, sized=True)  # tensor -> variable name; data: its place in the step
        # Every variable key ever bound, by container ("losses" -> "losses[3]") and by (function or
        # None, head name): a name's binding at a step is the timeline's to say.
        self.items: dict[str, list[str]] = {}
        # ... and under every value it is a part of further up (``kept`` -> ``kept[3][0]``,
        # ``kept[3].loss``: a list of tuples or of namedtuples), for a container whose items are not
        # tensors themselves (``Index.item_keys``).
        self.nested: dict[str, list[str]] = {}
        self.headed: dict[tuple[str | None, str], list[str]] = {}
        self.users = Relation(self._reads, sized=True)  # storage -> tensor
        self.savers = Relation(self._reads)  # tensor -> (node, saved name)
        self.refs = Counts()  # tensor/node id -> how many edges of live facts point at it
        self.places = Counts()  # variable name -> its place in the step's variables
        self.grad_users = Counts()  # storage -> how many tensors on it require grad
        self.gone: dict[str, array] = {}  # tensor -> the steps at which it was dropped
        self._grad_users: dict[str, int] = {}  # (while building) storage -> its count now
        # tensor/node id -> (step, its place in the step's dict); a Series once it moved (dropped and back)
        self.order: dict[str, tuple[int, int] | Series] = {}
        self.labels: dict[str, Series] = {}  # tensor -> (Holding's first name, first graph holder)
        # storage -> (step, previous step a tensor was seen on it) where that tensor's version rose
        self.bumps: dict[str, list[tuple[int, int]]] = {}
        self.grad_until: dict[str, float] = {}  # tensor -> last step at which it had a .grad
        # (step, node's place, saved name's place, node, saved name, complaint): a saved tensor
        # first reported as modified in place, in the order a step lists them
        self.modified: list[tuple[int, int, int, str, str, str]] = []
        self.final = State()
        # (while building) what the pass carries from step to step
        self._places = count()
        self._var_place: dict[str, int] = {}
        self._refs: dict[str, int] = {}
        # (tensor, storage) -> (its version, the step it left at)
        self._seen_on: dict[tuple[str, str], tuple[int, float]] = {}
        self._flagged: set[tuple[str, str]] = set()
        self._budget = current_budget()
        self.replayed = HeldReplay()  # the index's own replay (``feed``)
        if not fed:
            self._build()

    def item_keys(self, container: str) -> list[str]:
        """Every key ever bound as an item of ``container`` (``losses[3]``); for a container whose
        items are tuples, dicts or namedtuples rather than tensors, the tensors they hold
        (``kept[3][0]``, ``kept[3].loss``)."""
        return self.items.get(container) or self.nested.get(container, [])

    def at(self, step: int) -> At:
        return At(self, step)

    def __len__(self) -> int:
        return len(self.lines)

    # ---- the one pass ----------------------------------------------------------------------------
    def _build(self) -> None:
        for delta in self.trace.steps:
            self.feed(delta)
        self.finish(self.replayed.state)

    def feed(self, delta: DeltaStep) -> None:
        """The next step, replayed by the index itself (``replayed``): when no view builder's replay
        hands it to ``add``. Feed a whole trace either this way or by ``add``."""
        changes, held = self.replayed.add(delta)
        self.add(self.replayed.state, changes, self.replayed.holding, held)

    def add(self, state: State, changes: Changes, holding: Holding, held: HoldingChanges) -> None:
        """One replayed step, after ``holding.update(state, changes)`` gave ``held``."""
        if not changes.index % 256:
            self._budget.check()
        self.timeline.add(changes.delta)
        places, var_place, refs = self._places, self._var_place, self._refs
        k = changes.index
        delta, dropped = changes.delta, changes.delta.dropped
        moved = set(dropped.variables) & set(delta.variables) if dropped.variables else set()
        for name, old in changes.old_variables.items():
            new = state.variables.get(name)
            if old == new and name not in moved:
                continue
            if old is not None:
                self.names.remove(old, name, k)
            present_before = old is not None and name not in moved
            if new is None:
                var_place.pop(name, None)
                continue
            if not present_before:
                if name not in self.places:
                    self._list(name)
                var_place[name] = next(places)
                self.places.set(name, k, var_place[name])
            self.names.add(new, name, k, var_place[name])
        ref_delta: dict[str, int] = {}
        moved_tensors = set(dropped.tensors) if dropped.tensors else set()
        for tid, old in changes.old_tensors.items():
            new = state.tensors.get(tid)
            self._tensor(k, tid, old, new, tid in moved_tensors, places, self._seen_on)
            if (old is not None and new is not None and old.grad == new.grad and old.base == new.base
                    and old.grad_fn == new.grad_fn):
                continue  # set anew with the same edges (an optimizer step): -1 and +1 would cancel
            for target in tensor_edges(old):
                ref_delta[target] = ref_delta.get(target, 0) - 1
            for target in tensor_edges(new):
                ref_delta[target] = ref_delta.get(target, 0) + 1
        moved_nodes = set(dropped.nodes) if dropped.nodes else set()
        for nid, old in changes.old_nodes.items():
            new = state.nodes.get(nid)
            if new is not None and (old is None or nid in moved_nodes):
                self._place(nid, k, next(places))
            for target in node_edges(old):
                ref_delta[target] = ref_delta.get(target, 0) - 1
            for target in node_edges(new):
                ref_delta[target] = ref_delta.get(target, 0) + 1
            self._saved(k, nid, old, new, self._flagged)
        for ident, change in ref_delta.items():
            if change:
                refs[ident] = refs.get(ident, 0) + change
                self.refs.set(ident, k, refs[ident])
        if self.accounting is not None:
            self.accounting.add(holding, state, changes, held)
        touched = held.renamed | held.reheld
        if held.reheld:
            # A view the graph holds names its base's holder (``…._base``): the base reads anew too.
            touched.update(f.base for t in held.reheld if (f := state.tensors.get(t)) is not None and f.base)
        for tid in touched:
            # A tensor with a variable name is labelled by it (``At.names``); when it loses the
            # last one, Holding reports it renamed, and this records the label it has then.
            if tid in state.tensors and not holding.own.get(tid):
                label = (holding.first_name(tid), None) if holding.is_named(tid) else \
                    (None, holding.first_holder(tid))
                series = self.labels.get(tid)
                if series is None:
                    series = self.labels[tid] = Series((None, None))
                series.set(k, label)

    def add_step(self, step: Any) -> None:
        """``add`` as a view builder of ``app.render.steps.drive`` (its ``StepInput``; not imported:
        the diagnostics never depend on the views)."""
        self.add(step.state, step.changes, step.holding, step.held)

    def finish(self, state: State) -> None:
        """After the last step (``state``: the state after it)."""
        self.final = state
        self.modified.sort(key=lambda m: m[:3])

    def _place(self, ident: str, k: int, place: int) -> None:
        known = self.order.get(ident)
        if known is None:
            self.order[ident] = (k, place)  # most ids appear once: no history to keep
            return
        if isinstance(known, tuple):
            series = Series()
            series.set(*known)
            self.order[ident] = known = series
        known.set(k, place)

    def place(self, ident: str, k: int) -> float:
        """Where ``ident`` comes in step ``k``'s dict of its kind (infinity: not there)."""
        known = self.order.get(ident)
        if isinstance(known, tuple):
            return known[1] if k >= known[0] else math.inf
        place = known.at(k) if known is not None else None
        return place if place is not None else math.inf

    def _list(self, name: str) -> None:
        """A variable key bound for the first time: file it under its container and its head."""
        container = container_of(name)
        if container is not None:
            self.items.setdefault(container, []).append(name)
        outer = part_of(name)
        outer = part_of(outer) if outer is not None and outer == container else outer
        while outer is not None:
            self.nested.setdefault(outer, []).append(name)
            outer = part_of(outer)
        self.headed.setdefault(head_of(name), []).append(name)

    def _tensor(
        self, k: int, tid: str, old: TensorFact | None, new: TensorFact | None, moved: bool, places: count,
        seen_on: dict[tuple[str, str], tuple[int, float]],
    ) -> None:
        if new is not None and (old is None or moved):
            self._place(tid, k, next(places))
        old_sid = old.storage if old is not None else None
        new_sid = new.storage if new is not None else None
        if old_sid != new_sid:
            if old_sid is not None:
                self.users.remove(old_sid, tid, k)
            if new_sid is not None:
                self.users.add(new_sid, tid, k)
        old_grad = old_sid if old is not None and old.requires_grad else None
        new_grad = new_sid if new is not None and new.requires_grad else None
        if old_grad != new_grad:
            for sid, delta in ((old_grad, -1), (new_grad, +1)):
                if sid is not None:
                    self._grad_users[sid] = self._grad_users.get(sid, 0) + delta
                    self.grad_users.set(sid, k, self._grad_users[sid])
        if new is None and old is not None:
            gone = self.gone.get(tid)
            if gone is None:
                gone = self.gone[tid] = array("q")
            gone.append(k)
        # Version rises, per storage: what tells whether a tensor on it was written in place.
        if old_sid is not None and old_sid != new_sid:
            seen_on[(tid, old_sid)] = (old.version or 0, k)  # type: ignore[union-attr]
        if new_sid is not None:
            version = new.version or 0  # type: ignore[union-attr]
            before = seen_on.get((tid, new_sid))
            # A write torch does not count moves the numbers alone: BatchNorm's running statistics in
            # a training forward, numpy's a[0] = 5 through from_numpy, w.data.mul_ (its own counter).
            if before is not None and (version > before[0] or (
                    old is not None and old_sid == new_sid and version == before[0]
                    and (old.values != new.values or old.summary != new.summary))):  # type: ignore[union-attr]
                last_seen = k - 1 if before[1] == math.inf else int(before[1]) - 1
                self.bumps.setdefault(new_sid, []).append((k, last_seen))
            seen_on[(tid, new_sid)] = (version, math.inf)
        had = old is not None and old.grad is not None
        has = new is not None and new.grad is not None
        if has:
            self.grad_until[tid] = math.inf
        elif had:
            self.grad_until[tid] = k - 1

    def _saved(self, k: int, nid: str, old: NodeFact | None, new: NodeFact | None,
               flagged: set[tuple[str, str]]) -> None:
        before = {(t, name) for name, t in old.saved.items() if t is not None} if old is not None else set()
        after = {(t, name) for name, t in new.saved.items() if t is not None} if new is not None else set()
        for tid, name in before - after:
            self.savers.remove(tid, (nid, name), k)
        for tid, name in after - before:
            self.savers.add(tid, (nid, name), k)
        if new is None:
            return
        for position, (name, complaint) in enumerate(new.saved_errors.items()):
            if MODIFIED_MARK in complaint and (nid, name) not in flagged:
                flagged.add((nid, name))
                self.modified.append((k, self.place(nid, k), position, nid, name, complaint))


class At:
    """One step of the trace, read fact by fact through the index (never whole)."""

    __slots__ = ("index", "step")

    def __init__(self, index: Index, step: int) -> None:
        self.index = index
        self.step = step

    @property
    def line(self) -> int:
        return self.index.lines[self.step] if self.step >= 0 else 0

    def _read(self, kind: str, ident: str | None) -> Any:
        if ident is None or self.step < 0:
            return None
        index = self.index
        index._reads.count += 1  # (not through ``reads``: a property, two calls more per fact read)
        return index.timeline.value(kind, ident, self.step)

    def reader(self, kind: str) -> Callable[[str | None], Any]:
        """``tensor`` / ``node`` / ``storage`` / ``variable`` of this step as one function, for a walk that
        reads many facts of one kind: the same answers, counted as reads the same, without the three
        calls a fact that reading them one by one costs."""
        histories, step, reads = self.index.timeline.by_id(kind), self.step, self.index._reads

        def read(ident: str | None) -> Any:
            if ident is None or step < 0:
                return None
            reads.count += 1
            history = histories.get(ident)
            if history is None:
                return None
            i = bisect_right(history.steps, step) - 1  # ``Timeline.value``
            return history.values[i] if i >= 0 else None

        return read

    def variable(self, key: str) -> str | None:
        return self._read("variables", key)

    def tensor(self, tid: str | None) -> TensorFact | None:
        return self._read("tensors", tid)

    def node(self, nid: str | None) -> NodeFact | None:
        return self._read("nodes", nid)

    def storage(self, sid: str | None) -> StorageFact | None:
        return self._read("storages", sid)

    def names(self, tid: str) -> list[str]:
        """The variable names of ``tid``, in the order the step lists its variables."""
        found = self.index.names.members(tid, self.step)
        return [name for name, _ in sorted(found, key=lambda m: m[1])]

    def variable_place(self, tid: str) -> float:
        """Where ``tid`` first comes in the step's variables (for "in the order of the step")."""
        return min((p for _, p in self.index.names.members(tid, self.step)), default=math.inf)

    def name_count(self, tid: str) -> int:
        return self.index.names.size(tid, self.step)

    def keys(self, container: str) -> list[str]:
        """The item keys of a container (``losses[0]``, ``losses[1]``…) bound at this step."""
        return [key for key in self.index.item_keys(container) if self.variable(key) is not None]

    def keys_headed(self, function: str | None, head: str) -> list[str]:
        """The keys bound at this step under a head name (``m`` for ``m.fc.weight``, ``m[0]``)."""
        return [key for key in self.index.headed.get((function, head), ()) if self.variable(key) is not None]

    def users(self, sid: str) -> list[str]:
        """The tensors on storage ``sid``, in the order the step lists its tensors."""
        found = [tid for tid, _ in self.index.users.members(sid, self.step)]
        return sorted(found, key=self.order)

    def user_count(self, sid: str) -> int:
        return self.index.users.size(sid, self.step)

    def grad_user_count(self, sid: str) -> int:
        """How many tensors on storage ``sid`` require grad."""
        self.index._reads.count += 1
        return self.index.grad_users.at(sid, self.step)

    def savers(self, tid: str) -> list[tuple[str, str]]:
        """(node, saved name) for every node that saved ``tid`` (``trace.saved_by`` orders them)."""
        return [pair for pair, _ in self.index.savers.members(tid, self.step)]

    def refs(self, ident: str) -> int:
        """How many edges of this step's facts point at ``ident`` (see ``tensor_edges``/``node_edges``)."""
        self.index._reads.count += 1
        return self.index.refs.at(ident, self.step)

    def order(self, ident: str) -> float:
        self.index._reads.count += 1
        return self.index.place(ident, self.step)

    def holding_label(self, tid: str) -> tuple[str | None, str | None]:
        """(``Holding.first_name``, ``Holding.first_holder``) of ``tid`` at this step: one is None."""
        self.index._reads.count += 1
        series = self.index.labels.get(tid)
        return series.at(self.step) if series is not None else (None, None)
