"""The incremental step's plan, for ``SnapshotTaker`` (``app.engine.snapshot``): read what the
names newly reach and what was marked dirty, then settle the step's edges, removals and twin matches
until they agree — all before anything of R is changed (``app.engine.commit`` writes the plan).

A removal is a count that drops to zero: every member of R counts its in-edges from R plus the names
bound to it, and a drop cascades. A saved tensor torch re-creates on every access is matched to a
live twin after R is known. When the plan cannot promise the whole snapshot's answer it raises
``Retry`` and the taker reads whole. A mixin: the state is the taker's (its ``__init__``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from app.engine.commit import id_order, node_edges, tensor_edges
from app.engine.reader import Reader
from app.engine.saved import SAVED_PREFIX, Deferred, fact_signature, packed_by_hooks

SETTLE_ROUNDS = 8


class Retry(Exception):  # noqa: N818 - control flow of the snapshot modules
    """The incremental step cannot promise the whole snapshot's answer: take a whole one."""


@dataclass
class Plan:
    """What one incremental step read and decided, before anything is committed."""

    reader: Reader
    names: dict[str, str | None]  # name -> its tensor after the step (None: gone)
    roots: Counts  # tensor (or node) -> names bound to it after the step, plus extra roots
    edges: dict[str, tuple[str, ...]] = field(default_factory=dict)  # members read at this step
    removed: set[str] = field(default_factory=set)


class Planning:
    """The taker's incremental reading: a ``Plan`` of the step, nothing of R changed yet."""

    def _plan(self, bound: dict[str, str], gone: list[str]) -> Plan:
        dirty = self._dirty
        names: dict[str, str | None] = dict.fromkeys(gone)
        names.update(bound)
        roots = Counts(self.roots)
        for name, new in names.items():
            old = self.names.get(name)
            if old is not None:
                roots.add(old, -1)
            if new is not None:
                roots.add(new, 1)
        self._mark_moved(bound)
        members = Members(self.tensors, self.nodes)
        reader = Reader(self, fresh=lambda ident: ident not in members or ident in dirty,
                        cap=uncapped)
        # Roots first, in walk order: what new or rebound names reach, and named tensors that may
        # have changed — met in the order the whole snapshot meets them; then a backward step's own.
        seeds = set(bound.values()) | {t for t in dirty if roots.get(t)}
        ordered: Iterable[str] = seeds
        if len(seeds) > 1:  # (one seed, most steps: no order to find)
            named_now: dict[str, list[str]] = defaultdict(list)  # tensor -> the names this step bound to it
            for name, tid in names.items():
                if tid is not None:
                    named_now[tid].append(name)
            ordered = sorted(seeds, key=lambda t: self._first_position(t, names, named_now))
        for tid in ordered:
            obj = self.tensor_ids.object(tid)
            if obj is not None:
                reader.add_tensor(tid, obj)
        for ident, obj in self._extra:
            roots.add(ident, 1)
            if ident in members and ident not in dirty:
                continue
            seeds.add(ident)
            reader.add(ident, obj, self.node_keys.get(ident))
        reader.drain()
        found: dict[str, Any] = {}  # what _locate found, shared: one graph's nodes find each other
        for nid in sorted(self._flips, key=id_order):
            if nid not in dirty and nid not in reader.nodes and not self._flip_known(reader, nid, found):
                dirty.add(nid)  # read it whole, below
        # Then what changed deeper in the graph.
        lost = [ident for ident in sorted((t for t in dirty - seeds if t in members), key=id_order)
                if not self._read_again(reader, ident)]
        plan = Plan(reader, names, roots)
        self._settle(plan)
        if any(ident not in plan.removed for ident in lost):
            raise Retry  # a member that may have changed, still in R, and not found to read again
        return plan

    def _flip_known(self, reader: Reader, nid: str, found: dict[str, Any]) -> bool:
        """A node whose saved copies were given ids of their own at the last step, and whose objects
        still live (a saved input's wrapper, kept while torch holds it): read again, it finds them
        known. Nothing else of it changed (it is not dirty), so rather than reading it whole, ask
        it for those slots only and file it as read with its fact as it stands and those slots
        "direct" — what reading it whole gives. False (read it whole) for any slot that is not
        plainly such a copy: a twin match, a copy that died, a custom Function's, one packed by a
        hook, one of a sequence."""
        keyed = self._keyed_slots(nid)
        if keyed is None:
            return False
        if self._flips_at_once(nid, keyed):
            self._file_flips(nid, keyed)
            return True
        fact = self.nodes[nid]
        kinds = self.saved_kinds.get(nid, {})
        copies = [fact["saved"][name] for name in keyed]
        node = self._locate(nid, found, reader)
        if node is None or isinstance(node, BackwardCFunction):
            return False
        now = dict(kinds)
        for name in keyed:
            attribute = SAVED_PREFIX + name
            if packed_by_hooks(node, attribute) is not None:
                return False
            try:
                value = getattr(node, attribute)
            except RuntimeError:
                return False
            if not isinstance(value, torch.Tensor) or self.tensor_ids.known(value) != fact["saved"][name]:
                return False
            now[name] = "direct"
        if self._flips_alone(nid, copies):
            # Nothing but these kinds changes: file them now, without the node among what the step
            # read (its fact, edges and indexes stand; its settling and commit were a tenth of a leak).
            self._file_flips(nid, keyed)
            return True
        reader.nodes[nid] = fact
        reader.objects[nid] = node
        reader.saved_kinds[nid] = now
        reader.node_keys.setdefault(nid, self.node_keys.get(nid))
        return True

    def _keyed_slots(self, nid: str) -> list[str] | None:
        """The slots of a rechecked node (``_flips``) whose copies had ids of their own, if each is
        plainly such a copy, alive: no twin match among its slots, none of a sequence."""
        fact = self.nodes[nid]
        kinds = self.saved_kinds.get(nid, {})
        tids = self._flips[nid]
        if "twin" in kinds.values():
            return None
        keyed = [name for name, kind in kinds.items() if kind == "keyed"]
        if not keyed or any(fact["saved"].get(name) not in tids or "[" in name for name in keyed):
            return None
        return keyed

    def _flips_at_once(self, nid: str, keyed: list[str]) -> bool:
        """Can these slots be filed "direct" without asking the node? Each handed out, twice at the
        last step, the object it holds (``_note_recheck``): it hands out that object still, which
        lives and is known now — and nothing but their kind changes (``_flips_alone``). (Locating
        the node and asking it was most of a kept sin leak's append line.)"""
        copies = [self.nodes[nid]["saved"][name] for name in keyed]
        return self._stable.issuperset(copies) and self._flips_alone(nid, copies)

    def _file_flips(self, nid: str, keyed: list[str]) -> None:
        saved = self.nodes[nid]["saved"]
        self.saved_kinds[nid] = {**self.saved_kinds.get(nid, {}), **dict.fromkeys(keyed, "direct")}
        for name in keyed:
            del self.keyed_owner[saved[name]]

    def _mark_moved(self, bound: dict[str, str]) -> None:
        """A tensor of R written where no call showed it, named again, is read again: the gradient
        a backward pass summed in place (a tensor used twice, ``y * y``) as a hook's argument."""
        dirty = self._dirty
        for tid in bound.values():
            if tid in self.tensors and tid not in dirty:
                obj = self.tensor_ids.object(tid)
                if obj is not None and not self._same_version(tid, obj):
                    dirty.add(tid)

    def _names_only(self, bound: dict[str, str], gone: list[str]) -> bool:
        """Does this step only give new names to tensors of R, with nothing else to read or recheck
        (``losses.append(loss)``)? Then nothing is read, no count drops, nothing leaves R: the
        names are filed (``Commit._bind_names``). Its rechecked nodes' copies are filed here when
        each can be at once; any other leaves the step to the plan."""
        self._mark_moved(bound)
        if gone or self._dirty or self._extra or self._extra_before:
            return False
        tensors, names = self.tensors, self.names
        for name, tid in bound.items():
            if tid not in tensors or name in names:
                return False
        flips = self._flips
        if flips:
            slots = {nid: self._keyed_slots(nid) for nid in flips}
            if not all(keyed is not None and self._flips_at_once(nid, keyed) for nid, keyed in slots.items()):
                return False
            for nid, keyed in slots.items():
                self._file_flips(nid, keyed)  # type: ignore[arg-type]
        return True

    def _note_recheck(self, reader: Reader) -> None:
        """After a step: its saved copies with ids of their own are rechecked at the next one
        (``_flip_known``), and ``_stable`` are those whose slot handed out the same object when
        asked again now — a saved input, which torch keeps as the very tensor (a saved output is
        made afresh at each access, and that one's wrapper dies with the step). Only plain slots:
        not a custom Function's, not one of a sequence, not packed by a hook."""
        owners = reader.keyed_owners
        self._recheck = set(owners)
        stable: set[str] = set()
        for nid in set(owners.values()):
            node, fact = reader.objects.get(nid), reader.nodes.get(nid)
            if node is None or not fact or isinstance(node, BackwardCFunction):
                continue
            for name, tid in fact["saved"].items():
                copy = reader.objects.get(tid)
                if copy is None or owners.get(tid) != nid or "[" in name or \
                        reader.tensors[tid].get("grad_fn") == nid:
                    continue  # (its grad_fn the node: a saved output, made afresh at each access)
                attribute = SAVED_PREFIX + name
                if packed_by_hooks(node, attribute) is not None:
                    continue
                try:
                    if getattr(node, attribute) is copy:
                        stable.add(tid)
                except RuntimeError:
                    continue
        self._stable = stable

    def _flips_alone(self, nid: str, tids: list[str]) -> bool:
        """Do these copies of ``nid``, found known again, change nothing but their kind? Their edges
        stay (a copy's grad_fn is not ``nid``: see tensor_edges), and no other node saving on their
        storages waits for a twin (a copy found known may now be one: ``_rematch_needed``)."""
        for tid in tids:
            tensor = self.tensors.get(tid)
            if tensor is None or tensor["grad_fn"] == nid or self.keyed_owner.get(tid) != nid:
                return False
            for other in self.saving.get(tensor["storage"], ()) if tensor["storage"] is not None else ():
                if other != nid and "keyed" in self.saved_kinds.get(other, {}).values():
                    return False
        return True

    def _read_again(self, reader: Reader, ident: str) -> bool:
        """Read a member of R again; False when its object was not found (dead, or out of reach)."""
        if ident in reader.tensors or ident in reader.nodes or ident in self.keyed_owner:
            return True
        obj = self._locate(ident, {}, reader)
        if obj is None:
            return False
        reader.add(ident, obj, self.node_keys.get(ident))
        reader.drain()
        return True

    def _settle(self, plan: Plan) -> None:
        """Edges, removals and twin matches of the step, read further until they agree."""
        reader = plan.reader
        for _round in range(SETTLE_ROUNDS):
            for tid, fact in reader.tensors.items():
                plan.edges[tid] = tensor_edges(fact, self._owner_at(tid, reader))
            for nid, fact in reader.nodes.items():
                plan.edges[nid] = node_edges(fact, reader.saved_kinds.get(nid, {}))
            plan.removed = self._removals(plan)
            again = self._rematch_needed(plan)
            if not again and not reader.deferred:
                return
            for nid in sorted(again, key=id_order):
                self._dirty.add(nid)  # unchanged itself, but its twin match may have: read it anyway
                self._read_again(reader, nid)
                if nid not in reader.nodes:
                    raise Retry
            pending, reader.deferred = reader.deferred, []
            for item in pending:
                if not reader.resolve_known(item):
                    reader.resolve(item, self._twin(reader, item, plan))
            reader.drain()
        raise Retry

    def _twin(self, reader: Reader, item: Deferred, plan: Plan) -> str | None:
        """The live tensor a re-created saved copy stands for (its node's own output first)."""
        if item.storage is None:
            return None
        twins = [(tid, fact) for tid, fact in self._on_storage_after(item.storage, plan)
                 if fact_signature(fact) == item.signature]
        pool = [tid for tid, fact in twins if fact["grad_fn"] == item.nid] or [tid for tid, _ in twins]
        before = reader.twin_before(item)
        if before in pool:
            return before  # kept while still among the best, as the whole snapshot keeps it
        if len(pool) > 1:
            raise Retry  # the whole snapshot takes whichever it met first
        return pool[0] if pool else None

    def _on_storage_after(self, storage: str, plan: Plan) -> list[tuple[str, dict[str, Any]]]:
        """Tensors on ``storage`` that hard edges reach after the step (re-created copies excluded)."""
        reader = plan.reader
        found = []
        for tid in self.on_storage.get(storage, ()):
            if tid not in plan.removed and tid not in reader.tensors and not self._excluded(tid, reader):
                found.append((tid, self.tensors[tid]))
        for tid in reader.by_storage.get(storage, ()):
            if tid not in plan.removed and not self._excluded(tid, reader):
                found.append((tid, reader.tensors[tid]))
        return found

    def _owner_at(self, tid: str, reader: Reader) -> str | None:
        """The node whose saved copy with an id of its own ``tid`` is after this step: keyed at this
        step, or before it by a node not read again."""
        owner = reader.keyed_owners.get(tid)
        if owner is not None:
            return owner
        owner = self.keyed_owner.get(tid)
        return owner if owner is not None and owner not in reader.nodes else None

    def _excluded(self, tid: str, reader: Reader) -> bool:
        """A saved copy with an id of its own is met only after matching, so it is no twin — unless
        its node, read again, now finds the copy's object known (then it is met like any tensor)."""
        if tid in reader.keyed_owners:
            return True
        owner = self.keyed_owner.get(tid)
        return owner is not None and not self._found_known(tid, owner, reader)

    @staticmethod
    def _found_known(tid: str, owner: str, reader: Reader) -> bool:
        """Did ``owner``, read at this step, find its saved copy ``tid`` as a known object? (A saved
        output is a fresh object again: its slot waits to be matched, or keyed anew.)"""
        fact = reader.nodes.get(owner)
        kinds = reader.saved_kinds.get(owner)
        return bool(fact) and kinds is not None and any(
            kind == "direct" and fact["saved"].get(name) == tid for name, kind in kinds.items())

    def _rematch_needed(self, plan: Plan) -> set[str]:
        """Nodes not read at this step whose twin matches the step changed: a twin left R, or a
        tensor appeared on the storage of a saved copy that had no twin — a new one, or a saved copy
        that had an id of its own and whose node, read again, now finds it known (``_excluded``)."""
        reader = plan.reader
        needed: set[str] = set()
        for tid in plan.removed:
            needed |= self.matched_by.get(tid, set())
        eligible = [tid for tid, fact in reader.tensors.items() if fact and tid not in self.tensors]
        for nid in reader.nodes:
            for name, kind in self.saved_kinds.get(nid, {}).items():
                tid = self.nodes.get(nid, {}).get("saved", {}).get(name) if kind == "keyed" else None
                if tid is not None and tid in self.tensors and self._found_known(tid, nid, reader):
                    eligible.append(tid)
        for tid in eligible:
            storage = (reader.tensors.get(tid) or self.tensors[tid])["storage"]
            for nid in self.saving.get(storage, ()) if storage is not None else ():
                kinds = self.saved_kinds.get(nid, {}).values()
                if "keyed" in kinds or "twin" in kinds:  # a twin met earlier now, or a copy alone
                    needed.add(nid)
        return {nid for nid in needed if nid not in reader.nodes and nid not in plan.removed}

    def _removals(self, plan: Plan) -> set[str]:
        """Members that neither an edge from R nor a name reaches after the step (zero counts, cascaded)."""
        counts: dict[str, int] = {}

        def count(ident: str) -> int:
            found = counts.get(ident)
            if found is None:
                found = counts[ident] = plan.roots.get(ident, 0) + self.indegree.get(ident, 0)
            return found

        candidates: list[str] = []
        edges, tensors, nodes = self.edges, self.tensors, self.nodes
        for ident, new in plan.edges.items():
            if ident not in tensors and ident not in nodes:
                candidates.append(ident)  # read for the first time: is it reached at all?
            old = edges.get(ident, ())
            if old == new:
                continue  # read again with the same edges (most members): no count moves
            for target in old:
                counts[target] = count(target) - 1
                candidates.append(target)
            for target in new:
                counts[target] = count(target) + 1
        for name in plan.names:
            old = self.names.get(name)
            if old is not None:
                candidates.append(old)
        candidates.extend(self._extra_before)  # roots of the previous (backward) step only
        removed: set[str] = set()
        while candidates:
            ident = candidates.pop()
            if ident in removed or count(ident) > 0:
                continue
            if ident not in plan.edges and ident not in self.tensors and ident not in self.nodes:
                continue  # never a member
            removed.add(ident)
            for target in plan.edges.get(ident, self.edges.get(ident, ())):
                counts[target] = count(target) - 1
                candidates.append(target)
        return removed

    def _first_position(self, tid: str, names: dict[str, str | None],
                        named_now: dict[str, list[str]]) -> tuple[int, ...]:
        """Where the whole snapshot first meets ``tid`` among the names (walk order). ``named_now``:
        the names this step bound, by tensor (a step that binds n names sorts n seeds by them)."""
        mine = [n for n in self.names_of.get(tid, ()) if names.get(n, tid) == tid]
        mine += named_now.get(tid, ())
        return min((self.walker.position(n) for n in mine), default=(1 << 30,))

    def _locate(self, ident: str, memo: dict[str, Any], reader: Reader | None = None) -> Any:
        """The live object of a member, found again from a parent in R (nodes have no other handle),
        else from what ``reader`` read at this step: a node whose parents in R all died (the tensor
        a rebound name held) is still reached through the step's new nodes, as the whole snapshot
        reaches it (``F.max_pool2d(F.relu(h))`` then ``x = drop(flatten(x))``: the pool's node)."""
        found = self._locate_in_r(ident, memo)
        if found is None and reader is not None and not ident.startswith("t"):
            found = self._locate_through(ident, memo, reader, set())
            if found is None:
                # Further down: during a backward pass, the nodes above it that ran were freed, and the
                # node running now (read at this step) is some parents up (a hessian's inner pass).
                found = self._locate_in_r(ident, {}, reader.objects)
                if found is not None:
                    memo[ident] = found
        return found

    def _locate_through(self, ident: str, memo: dict[str, Any], reader: Reader, seen: set[str]) -> Any:
        """A node found through what the step read: a node or tensor read now whose edge reaches it,
        else a parent node in R found this way in turn (``out.add_(1)`` then ``out.mul_(2)``: the
        ReLU that saved ``out`` is two nodes under the tensor read again)."""
        seen.add(ident)
        key = self.node_keys.get(ident)
        holders = [reader.objects.get(nid) for nid, fact in reader.nodes.items()
                   if ident in (fact.get("next") or ())]
        holders += [reader.objects.get(tid) for tid, fact in reader.tensors.items()
                    if fact and fact["grad_fn"] == ident]
        found = self._held_by(holders, key)
        if found is None:
            for parent in sorted(self.parents.get(ident, ()), key=id_order):
                if parent.startswith("t") or parent in seen:
                    continue
                holder = memo.get(parent) or self._locate_through(parent, memo, reader, seen)
                found = self._held_by([holder], key) if holder is not None else None
                if found is not None:
                    break
        if found is not None:
            memo[ident] = found
        return found

    def _held_by(self, holders: list[Any], key: Any) -> Any:
        for holder in holders:
            candidates = [holder.grad_fn] if isinstance(holder, torch.Tensor) else \
                [fn for fn, _ in getattr(holder, "next_functions", ())]
            for candidate in candidates:
                if candidate is not None and self._key_of(candidate) == key:
                    return candidate
        return None

    def _locate_in_r(self, ident: str, memo: dict[str, Any], read: dict[str, Any] | None = None) -> Any:
        """``read``: objects read at this step, holders as good as a parent in R."""
        if ident in memo:
            return memo[ident]
        memo[ident] = None
        if ident.startswith("t"):
            memo[ident] = self.tensor_ids.object(ident)
            return memo[ident]
        if read is not None and ident in read:
            memo[ident] = read[ident]
            return memo[ident]
        key = self.node_keys.get(ident)
        for parent in sorted(self.parents.get(ident, ()), key=id_order):
            holder = self._locate_in_r(parent, memo, read)
            if holder is None:
                continue
            if isinstance(holder, torch.Tensor):
                candidates = [holder.grad_fn]
            else:
                candidates = [fn for fn, _ in holder.next_functions]
            for candidate in candidates:
                if candidate is not None and self._key_of(candidate) == key:
                    memo[ident] = candidate
                    return candidate
        return None


class Counts:
    """Counts as a step changes them, over the counts before it: copying them at every step would cost
    what the names hold (a thousand-item list of losses), not what the step changed."""

    __slots__ = ("_before", "_changed")

    def __init__(self, before: dict[str, int]) -> None:
        self._before = before
        self._changed: dict[str, int] = {}

    def get(self, key: str, default: int = 0) -> int:
        changed = self._changed.get(key)
        return changed if changed is not None else self._before.get(key, default)

    def add(self, key: str, amount: int) -> None:
        self._changed[key] = self.get(key) + amount


class Members:
    """``ident in members``: is it in R (before this step)? Without building a set of all of R."""

    __slots__ = ("_nodes", "_tensors")

    def __init__(self, tensors: dict[str, Any], nodes: dict[str, Any]) -> None:
        self._tensors, self._nodes = tensors, nodes

    def __contains__(self, ident: object) -> bool:
        return ident in self._tensors or ident in self._nodes


def uncapped(_kind: str, _count: int) -> bool:
    return True
