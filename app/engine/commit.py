"""R written, for ``SnapshotTaker`` (``app.engine.snapshot``): a step's plan committed as a delta
(facts set, members dropped, names and storages refreshed), and the edges, counts and indexes R
keeps across steps — each member's hard edges and in-degree, who is on which storage, who saved on
which storage, twin and keyed copies — kept exact as members change, or rebuilt after a whole
snapshot. A mixin: the state is the taker's (its ``__init__``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from app.engine.reader import Reader

if TYPE_CHECKING:
    from app.engine.plan import Plan


def tensor_edges(fact: dict[str, Any], owner: str | None = None) -> tuple[str, ...]:
    """A tensor's hard edges: its grad_fn, .grad and ._base. A saved copy with an id of its own
    leaves out its grad_fn when that is the node that saved it (``owner``: a saved output), where
    the edge would close a cycle. Any other grad_fn is an edge like any tensor's: it may be a node
    no ``next`` edge reaches (nn.GRUCell's MulBackward0 saves a copy whose CloneBackward0 is on no
    path of the graph), and it is older than the saving node, so it cannot reach back to it."""
    grad_fn, grad, base = fact["grad_fn"], fact["grad"], fact["base"]
    if grad_fn is not None and grad_fn == owner:
        grad_fn = None
    if grad is None and base is None:  # (most tensors: spelled out, it is called per tensor per round)
        return () if grad_fn is None else (grad_fn,)
    return tuple([x for x in (grad_fn, grad, base) if x is not None])


def node_edges(fact: dict[str, Any], kinds: dict[str, str]) -> tuple[str, ...]:
    """A node's hard edges: next functions, its leaf, the saved tensors it keeps (not the twins
    its re-created copies were matched to: those are reached some other way)."""
    edges = [n for n in fact["next"] if n is not None]
    if fact["variable"] is not None:
        edges.append(fact["variable"])
    edges.extend([t for name, t in fact["saved"].items() if t is not None and kinds.get(name) != "twin"])
    return tuple(edges)


def id_order(ident: str) -> tuple[int, str]:
    digits = ident[1:]
    return (int(digits), ident) if digits.isdigit() else (0, ident)


def empty_delta() -> dict[str, Any]:
    return {"variables": {}, "tensors": {}, "storages": {}, "nodes": {},
            "dropped": {"variables": [], "tensors": [], "storages": [], "nodes": []}}


def clean_delta(delta: dict[str, Any]) -> dict[str, Any]:
    """Leave out what is empty: a step that changed nothing is just its line and output."""
    dropped = {k: v for k, v in delta.pop("dropped").items() if v}
    out = {k: v for k, v in delta.items() if v}
    if dropped:
        out["dropped"] = dropped
    return out


class Commit:
    """The taker's writing of R: a plan committed, R's edges and indexes kept or rebuilt."""

    # ---- commit ----------------------------------------------------------------------------------
    def _commit(self, plan: Plan) -> dict[str, Any]:
        reader = plan.reader
        delta = empty_delta()
        moved: set[str] = set()  # storages that gained or lost a tensor
        changed_members: set[str] = set()
        for nid, fact in reader.nodes.items():
            if nid not in plan.removed:
                self._set_node(nid, fact, reader, delta)
        for tid, fact in reader.tensors.items():
            if tid not in plan.removed:
                changed_members.add(tid)
                self._set_tensor(tid, fact, delta, moved)
        self._rekey_edges(reader, plan)
        for nid, fact in reader.nodes.items():  # now that the tensors they saved are known
            if nid not in plan.removed:
                self._index_storages(nid, fact)
        for ident in sorted(plan.removed, key=id_order):
            changed_members.add(ident)
            self._drop(ident, delta, moved)
        touched_names = set(plan.names)
        for name, new in plan.names.items():
            old = self.names.pop(name, None)
            if old is not None:
                self.names_of[old].discard(name)
                self.roots[old] -= 1
            if new is not None:
                self.names[name] = new
                self.names_of[new].add(name)
                self.roots[new] += 1
        for tid in changed_members:
            touched_names |= self.names_of.get(tid, set())
        for sid in set(reader.storages) | moved:
            self._refresh_storage(sid, reader, delta)
        self._refresh_variables(touched_names, delta)
        self._note_recheck(reader)
        return clean_delta(delta)

    def _bind_names(self, bound: dict[str, str]) -> dict[str, Any]:
        """A step that only named tensors of R (``Planning._names_only``): the names filed, nothing
        read, so nothing keyed to recheck at the next step."""
        delta = empty_delta()
        for name, tid in bound.items():
            self.names[name] = tid
            self.names_of[tid].add(name)
            self.roots[tid] += 1
        self._refresh_variables(set(bound), delta)
        self._recheck, self._stable = set(), set()
        return clean_delta(delta)

    def _rekey_edges(self, reader: Reader, plan: Plan) -> None:
        """A tensor whose keyed status flipped (its node now finds its object) changes its edges."""
        for tid in self._keyed_flips:
            if tid in self.tensors and tid not in plan.removed:
                self._reedge(tid, tensor_edges(self.tensors[tid], self.keyed_owner.get(tid)))
        self._keyed_flips = set()

    _keyed_flips: set[str] = set()

    def _set_tensor(self, tid: str, fact: dict[str, Any], delta: dict[str, Any], moved: set[str]) -> None:
        old = self.tensors.get(tid)
        if old == fact:
            return
        delta["tensors"][tid] = fact
        self._reedge(tid, tensor_edges(fact, self.keyed_owner.get(tid)))
        old_sid = old["storage"] if old is not None else None
        if old_sid != fact["storage"]:
            self._link_counters(old_sid, fact["storage"])
            if old_sid is not None:
                self.on_storage[old_sid].discard(tid)
                moved.add(old_sid)
            if fact["storage"] is not None:
                self.on_storage[fact["storage"]].add(tid)
                moved.add(fact["storage"])
        self.tensors[tid] = fact
        if old_sid is not None and old_sid != fact["storage"]:
            # the nodes that saved it are filed under the storage it is on now (w.data = ...: a
            # write to its new memory breaks what they saved)
            for owner in self.parents.get(tid, ()):
                if owner in self.nodes:
                    self._index_storages(owner, self.nodes[owner])
        self._check_cyclic(tid)
        for owner in self.parents.get(tid, ()):
            self._check_cyclic(owner)

    def _link_counters(self, old_sid: str | None, new_sid: str | None) -> None:
        """A tensor moved from ``old_sid`` to ``new_sid`` (``w.data = ...``, ``set_``) with its version
        counter, which tensors on its old storage may share (``d = w.detach()`` before), and tensors
        made on the new one from it later (``d[1:3]``): a write to either storage may move versions
        on the other. Linked both ways, as storages (the tensors come and go)."""
        if old_sid is None or new_sid is None or old_sid == new_sid:
            return
        self.counter_links.setdefault(old_sid, set()).add(new_sid)
        self.counter_links.setdefault(new_sid, set()).add(old_sid)

    def _prune_links(self) -> None:
        """Forget the links of storages no longer in R (after a whole snapshot replaced it)."""
        for sid in [s for s in self.counter_links if s not in self.storages]:
            self._unlink(sid)

    def _unlink(self, sid: str) -> None:
        """A storage leaves R: its links go, but the storages it linked stay linked to each other
        (``w.set_(a)`` then ``w.data = b``: ``a`` may go, ``w``'s first and last memory still share)."""
        others = self.counter_links.pop(sid, set())
        for other in others:
            links = self.counter_links.get(other)
            if links is not None:
                links.discard(sid)
                links |= others - {other}
                if not links:
                    del self.counter_links[other]

    def _check_cyclic(self, tid: str) -> None:
        """Is ``tid``'s .grad a tensor with a graph, a base or a grad of its own (a possible cycle)?"""
        fact = self.tensors.get(tid)
        grad = self.tensors.get(fact["grad"]) if fact is not None and fact["grad"] else None
        if grad is not None and (grad["grad_fn"] or grad["base"] or grad["grad"]):
            self.cyclic.add(tid)
        else:
            self.cyclic.discard(tid)

    def _set_node(self, nid: str, fact: dict[str, Any], reader: Reader, delta: dict[str, Any]) -> None:
        kinds = reader.saved_kinds.get(nid, {})
        self.node_keys[nid] = reader.node_keys.get(nid, self.node_keys.get(nid))
        stale = reader.stale_saves.get(nid)
        if stale:
            self.stale_saves[nid] = stale
        else:
            self.stale_saves.pop(nid, None)
        if self.nodes.get(nid) == fact and self.saved_kinds.get(nid) == kinds:
            return  # read again and found as it was: its edges and indexes stand
        was_keyed = set()
        for tid in self.nodes.get(nid, {}).get("saved", {}).values():
            if tid is not None:
                self.matched_by[tid].discard(nid)
                if self.keyed_owner.get(tid) == nid:
                    del self.keyed_owner[tid]
                    was_keyed.add(tid)
        self.saved_kinds[nid] = kinds
        self._index_saved(nid, fact, kinds)
        now_keyed = {t for name, t in fact["saved"].items() if t is not None and kinds.get(name) == "keyed"}
        self._keyed_flips = self._keyed_flips | (was_keyed ^ now_keyed)
        self._reedge(nid, node_edges(fact, kinds))
        if self.nodes.get(nid) != fact:
            delta["nodes"][nid] = fact
            self.nodes[nid] = fact

    def _index_saved(self, nid: str, fact: dict[str, Any], kinds: dict[str, str]) -> None:
        for name, tid in fact["saved"].items():
            if tid is None:
                continue
            if kinds.get(name) == "twin":
                self.matched_by[tid].add(nid)
            elif kinds.get(name) == "keyed":
                self.keyed_owner[tid] = nid

    def _index_storages(self, nid: str, fact: dict[str, Any]) -> None:
        """The node saved tensors on these storages: a write to one may break what it saved. Kept
        exact (a node whose saved tensors backward freed leaves the index), or every write would
        read again every old graph that saved from the storage: the Adam loop's quadratic."""
        now = set()
        for tid in fact["saved"].values():
            tensor = self.tensors.get(tid) if tid is not None else None
            if tensor is not None and tensor["storage"] is not None:
                now.add(tensor["storage"])
        now.update(self.stale_saves.get(nid, ()))  # a write there changes the version its error names
        before = self.saves.get(nid, set())
        for sid in before - now:
            self._unfile(sid, nid)
        for sid in now - before:
            self.saving[sid].add(nid)
        if now:
            self.saves[nid] = now
        else:
            self.saves.pop(nid, None)

    def _unfile(self, sid: str, nid: str) -> None:
        holders = self.saving.get(sid)
        if holders is not None:
            holders.discard(nid)
            if not holders:
                del self.saving[sid]

    def _reedge(self, ident: str, new: tuple[str, ...]) -> None:
        old = self.edges.get(ident, ())
        if old == new:  # a member read again with the same edges (most are): its counts stand
            return
        indegree = self.indegree
        for target in old:
            parents = self.parents[target]
            parents[ident] -= 1
            if not parents[ident]:
                del parents[ident]
            indegree[target] -= 1
            if not indegree[target]:
                del indegree[target]
        for target in new:
            parents = self.parents[target]
            parents[ident] = parents.get(ident, 0) + 1
            indegree[target] += 1
        if new:
            self.edges[ident] = new
        else:
            self.edges.pop(ident, None)

    def _drop(self, ident: str, delta: dict[str, Any], moved: set[str]) -> None:
        self._reedge(ident, ())
        if ident in self.tensors:
            fact = self.tensors.pop(ident)
            delta["dropped"]["tensors"].append(ident)
            if fact["storage"] is not None:
                self.on_storage[fact["storage"]].discard(ident)
                moved.add(fact["storage"])
            self.keyed_owner.pop(ident, None)
            self.cyclic.discard(ident)
            self.matched_by.pop(ident, None)
        elif ident in self.nodes:
            fact = self.nodes.pop(ident)
            delta["dropped"]["nodes"].append(ident)
            for tid in fact["saved"].values():
                if tid is not None:
                    self.matched_by[tid].discard(ident)
            self.saved_kinds.pop(ident, None)
            self.stale_saves.pop(ident, None)
            for sid in self.saves.pop(ident, ()):
                self._unfile(sid, ident)
            self.node_ids.retire(self.node_keys.pop(ident, None))

    def _refresh_storage(self, sid: str, reader: Reader, delta: dict[str, Any]) -> None:
        if self.on_storage.get(sid):
            fact = reader.storages.get(sid)
            if fact is not None and self.storages.get(sid) != fact:
                self.storages[sid] = fact
                delta["storages"][sid] = fact
        elif sid in self.storages:
            del self.storages[sid]
            self.saving.pop(sid, None)
            if sid in self.counter_links:
                self._unlink(sid)
            self.volatile.discard(sid)
            delta["dropped"]["storages"].append(sid)

    def _refresh_variables(self, names: set[str], delta: dict[str, Any]) -> None:
        current = self.walker.current
        gone = (1 << 30,)
        # in walk order (the order a person reads them in), names gone last, by name
        for name in sorted(names, key=lambda n: (self.walker.position(n) if n in current else gone, n)):
            tid = self.names.get(name)
            if tid is not None and tid in self.tensors:
                if self.variables.get(name) != tid:
                    self.variables[name] = tid
                    delta["variables"][name] = tid
            elif name in self.variables:
                del self.variables[name]
                delta["dropped"]["variables"].append(name)

    def _rebuild(self) -> None:
        """Every edge, count and index again, from the facts of R (after a whole snapshot)."""
        self.names_of, self.roots = defaultdict(set), defaultdict(int)
        for name, tid in self.names.items():
            self.names_of[tid].add(name)
            self.roots[tid] += 1
        self.edges, self.parents, self.indegree = {}, defaultdict(dict), defaultdict(int)
        self.on_storage, self.saving, self.saves = defaultdict(set), defaultdict(set), {}
        self.matched_by, self.keyed_owner = defaultdict(set), {}
        for nid, fact in self.nodes.items():
            kinds = self.saved_kinds.get(nid, {})
            self._reedge(nid, node_edges(fact, kinds))
            self._index_saved(nid, fact, kinds)
        for tid, fact in self.tensors.items():
            self._reedge(tid, tensor_edges(fact, self.keyed_owner.get(tid)))
            if fact["storage"] is not None:
                self.on_storage[fact["storage"]].add(tid)
        for nid, fact in self.nodes.items():
            self._index_storages(nid, fact)
        self.cyclic = set()
        for tid in self.tensors:
            self._check_cyclic(tid)
        self.volatile &= set(self.storages)
