"""Step after step: what the user can reach, read incrementally, emitted as deltas.

After each executed line the engine says what changed: names bound or gone, tensors, storages and
graph nodes that appeared, changed or disappeared. Reading everything again at every step costs
steps × what is alive — quadratic for the leak the product exists to show — so ``SnapshotTaker``
keeps, across steps, the set ``R`` of objects reachable from the user's names, each member's last
fact and hard edges (tensor → grad_fn / grad / base; node → next / variable / saved), and at each
step reads again only:

* what the line's torch calls may have written, what a backward pass ran through, and storages whose
  memory was handed to Python (``app.engine.watch``);
* what the names newly reach (``app.engine.names`` says which names changed), and what that reaches.

Objects leave ``R`` when nothing reaches them any more: every member counts its in-edges from ``R``
plus the names bound to it, and a count that drops to zero cascades. That is exact because hard
edges form no cycles — except through a ``.grad`` with a graph of its own (``create_graph=True``);
while one exists, every step is a whole snapshot. A saved tensor torch re-creates on every access is
matched to a live twin *after* ``R`` is known (the twin is reached some other way, so the match
keeps nothing alive), exactly as the whole snapshot does.

A whole snapshot (``_whole``) is also taken when a twin match or a storage's dtype would depend on
reading order, while a cap on the objects read holds, when a line may change tensors behind torch's
back (``Tensor.set_``), and at every step with ``full=True`` — what the tests hold the incremental
snapshots to. The ids of objects first met in the same step may be numbered in another order than
a whole snapshot would number them (ids are opaque; the tests compare traces with ids renamed by
first reach).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from app.engine.arrays import ArrayReader
from app.engine.backward import NodeRan, freed_message, tensor_saves
from app.engine.ids import NodeIds, ObjectIds, StorageIds, key_leaf, tensor_pointer
from app.engine.names import NameWalker
from app.engine.reader import SAVED_PREFIX, Deferred, Reader, fact_signature, packed_by_hooks
from app.engine.values import ValueWriter
from app.engine.watch import Touches

MAX_TENSORS = 20_000
MAX_NODES = 20_000
SETTLE_ROUNDS = 8


_functorch_level = torch._C._functorch.maybe_current_level  # None outside torch.func transforms


class _Retry(Exception):  # noqa: N818 - control flow inside this module
    """The incremental step cannot promise the whole snapshot's answer: take a whole one."""


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


def _id_order(ident: str) -> tuple[int, str]:
    digits = ident[1:]
    return (int(digits), ident) if digits.isdigit() else (0, ident)


def _empty_delta() -> dict[str, Any]:
    return {"variables": {}, "tensors": {}, "storages": {}, "nodes": {},
            "dropped": {"variables": [], "tensors": [], "storages": [], "nodes": []}}


def _clean(delta: dict[str, Any]) -> dict[str, Any]:
    """Leave out what is empty: a step that changed nothing is just its line and output."""
    dropped = {k: v for k, v in delta.pop("dropped").items() if v}
    out = {k: v for k, v in delta.items() if v}
    if dropped:
        out["dropped"] = dropped
    return out


@dataclass
class _Plan:
    """What one incremental step read and decided, before anything is committed."""

    reader: Reader
    names: dict[str, str | None]  # name -> its tensor after the step (None: gone)
    roots: _Counts  # tensor (or node) -> names bound to it after the step, plus extra roots
    edges: dict[str, tuple[str, ...]] = field(default_factory=dict)  # members read at this step
    removed: set[str] = field(default_factory=set)


class SnapshotTaker:
    """The engine's memory of one run: ids, the reachable set and its facts, indexes and caches."""

    def __init__(self, full: bool = False) -> None:
        self.full = full
        self.tensor_ids = ObjectIds("t")
        self.storage_ids = StorageIds()
        self.node_ids = NodeIds()
        self.values = ValueWriter()
        self.walker = NameWalker(self.tensor_ids)
        self.arrays = ArrayReader(self.values)  # numpy arrays: read after the tensors, by memory
        self.saved_names: dict[type, tuple[str, ...]] = {}
        self.has_variable: dict[type, bool] = {}  # AccumulateGrad-like node types
        # node id -> saved name -> message, for buffers backward released: reading them again would
        # only raise again (node ids are never reused, so an entry never goes stale).
        self.freed: dict[str, dict[str, str]] = {}
        # R, and what each member said last.
        self.tensors: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.storages: dict[str, dict[str, Any]] = {}
        self.variables: dict[str, str] = {}  # the names emitted: those whose tensor is in R
        self.names: dict[str, str] = {}  # every name the walk found -> its tensor
        self.names_of: dict[str, set[str]] = defaultdict(set)
        self.roots: dict[str, int] = defaultdict(int)  # tensor -> how many names it has
        self.node_keys: dict[str, Any] = {}
        self.saved_kinds: dict[str, dict[str, str]] = {}  # node -> saved name -> direct/twin/keyed
        self.edges: dict[str, tuple[str, ...]] = {}
        self.parents: dict[str, dict[str, int]] = defaultdict(dict)  # member -> in-edge sources
        # member -> its in-edges in all (the sum over ``parents``): a leaf saved by every iteration's
        # node has thousands of parents, and summing them at every step made a leak quadratic.
        self.indegree: dict[str, int] = defaultdict(int)
        self.on_storage: dict[str, set[str]] = defaultdict(set)  # storage -> R tensors on it
        self.saving: dict[str, set[str]] = defaultdict(set)  # storage -> nodes saving a tensor on it
        self.saves: dict[str, set[str]] = {}  # node -> the storages it is filed under in ``saving``
        self.matched_by: dict[str, set[str]] = defaultdict(set)  # twin -> nodes matched to it
        self.keyed_owner: dict[str, str] = {}  # saved tensor torch re-creates -> its node
        self.volatile: set[str] = set()  # storages whose memory Python code may write
        self.cyclic: set[str] = set()  # tensors whose .grad has a graph of its own
        self.whole_steps = 0
        self._dirty: set[str] = set()
        self._dirty_storages: set[str] = set()
        self._whole_read = False
        # Saved copies given an id of its own at the last step: if the object still lives, its node is
        # read once more, since the whole snapshot may then meet it known (a saved input's wrapper,
        # kept while torch holds it) and match it (see _excluded). A saved output's wrapper is made
        # afresh at each access and dies with the step: re-reading its node would key it again, and
        # at every step, for every live graph (a kept ReLU/tanh loop's quadratic).
        self._recheck: set[str] = set()
        self._flips: dict[str, set[str]] = {}  # this step: node -> its rechecked copies (_flip_known)
        # What a backward step adds to the names as roots (the node that ran, its gradients), and
        # what the previous step added: without their names, are they still reached?
        self._extra: list[tuple[str, Any]] = []
        self._extra_before: set[str] = set()
        self._capped: dict[str, int] = {}  # caps the whole read of this step reached
        self._capped_last = False
        self.in_backward = False  # reading inside a backward pass: no storage objects (ids.tensor_pointer)
        self._in_transform = False  # the last step was read inside a torch.func transform

    # ---- one step --------------------------------------------------------------------------------
    def take(self, line: int, stdout: str, scopes: list[tuple[str, dict[str, Any]]],
             touches: Touches | None = None, ran: NodeRan | None = None,
             names_still: bool = False, in_pass: bool = False) -> dict[str, Any]:
        """The delta of one step; ``stdout`` is the text printed during it. With ``ran``, the step
        after one node of a backward pass (``app.engine.backward``). ``names_still``: the caller knows
        no snippet code ran since the last step, so no name can have changed (``names_still`` in
        ``app.engine.run``); a whole-snapshot run walks the names all the same. ``in_pass``: a line
        of the snippet that runs inside a backward pass (a hook, a custom backward, the forward a
        reentrant checkpoint runs again), read as the pass's node steps are: storages by their
        bytes only, until the pass ends."""
        # Reading facts must not run a snippet's __torch_function__, nor be seen by our own mode.
        with torch._C.DisableTorchFunction():
            bound, gone = self.walker.still() if names_still and not self.full else self.walker.walk(scopes)
            self.in_backward = in_pass = ran is not None or in_pass
            if ran is not None:
                self._node_ran(ran, touches)
            self._mark(touches, after_pass=not in_pass)
            delta = None
            # Inside a torch.func transform (and at the step it ends), what a wrapper tensor or an
            # AccumulateGrad's variable reads as depends on the transform's level at the moment of
            # reading, which no call marks: read whole.
            transformed = _functorch_level() is not None
            in_transform, self._in_transform = transformed or self._in_transform, transformed
            # (while a cap holds, which objects get in depends on the whole reading order: read whole)
            if not (self.full or self.cyclic or self._capped_last or in_transform
                    or (touches is not None and touches.whole)):
                delta = self._incremental(bound, gone)
            if delta is None:
                self.whole_steps += 1
                delta = self._whole()
            if ran is not None:
                delta.update(self._backward_fields(ran))
            self.arrays.step(self, delta)
            self._extra_before = {ident for ident, _ in self._extra}
            self._extra = []
            if not in_pass:
                self._meet_bare_storages()
            capped = {**self.walker.capped, **self._capped}
            self._capped_last, self._capped = bool(self._capped), {}
        if capped:
            delta["capped"] = capped
        delta["line"] = line
        delta["stdout"] = stdout
        return delta

    def _node_ran(self, ran: NodeRan, touches: Touches | None) -> None:
        """Before the step after a node of a backward pass: its gradients and the node itself are
        roots for this step, torch is about to free what it saved, and what it wrote is dirty."""
        node = ran.node
        leaf = self._leaf(node)
        key = self._key_of(node, leaf)
        nid = self.node_ids.of_key(key)
        self.node_keys.setdefault(nid, key)
        if ran.frees:
            message = freed_message()
            for name in tensor_saves(node, self.saved_names):
                self.freed.setdefault(nid, {})[name] = message
            self.storage_ids.release_saved(nid)
        for grad in (*ran.received, *ran.sent):
            if isinstance(grad, torch.Tensor):
                tid = self.tensor_ids.of(grad)
                self._extra.append((tid, grad))
                # torch adds gradients into its buffers in place, which moves their version: one
                # read at an earlier node of the pass, at the same version, reads the same (the
                # gradient a node sent, received by the next, is read once, not twice).
                if touches is not None and not self._same_version(tid, grad):
                    touches.tensors.add(id(grad))
                    pointer = tensor_pointer(grad)
                    if pointer:
                        touches.storages.add(pointer)
        self._extra.append((nid, node))
        if touches is not None:
            touches.backward_nodes.add(key)
            if leaf is not None:
                touches.backward_leaves.add(id(leaf))

    def _same_version(self, tid: str, tensor: torch.Tensor) -> bool:
        fact = self.tensors.get(tid)
        try:
            return fact is not None and fact["version"] is not None and fact["version"] == tensor._version
        except RuntimeError:  # no version counter (inference tensors)
            return False

    def _meet_bare_storages(self) -> None:
        """Outside a backward pass, give the storages met there by their bytes only their objects
        (through a live tensor on them), so the ids hold; those no tensor uses any more are forgotten."""
        for pointer, sid in self.storage_ids.take_bare_pointers().items():
            for tid in self.on_storage.get(sid, ()):
                tensor = self.tensor_ids.object(tid)
                if tensor is not None and tensor_pointer(tensor) == pointer:
                    storage = tensor.untyped_storage()
                    if self.storage_ids.known(storage) is None:
                        self.storage_ids.alias(storage, sid)
                    self.storage_ids.point(storage, sid, pointer)
                    break

    def _backward_fields(self, ran: NodeRan) -> dict[str, Any]:
        def ids(grads: tuple[Any, ...]) -> list[str | None]:
            return [self.tensor_ids.known(g) if isinstance(g, torch.Tensor) else None for g in grads]

        return {"phase": "backward", "node": self._extra[-1][0], "received": ids(ran.received),
                "sent": ids(ran.sent)}

    # ---- what may have changed -------------------------------------------------------------------
    def _mark(self, touches: Touches | None, after_pass: bool = False) -> None:
        dirty, storages = self._dirty, self._dirty_storages
        dirty.clear()
        storages.clear()
        if after_pass:
            # Storages met during a backward pass by their bytes only: one that died there and one
            # made at its address later in the pass (a gradient) were read as one. Read them again
            # with their objects now (app.engine.run.on_backward no longer marks the whole pass),
            # but for those a tensor they were met through still holds, as they were read.
            storages |= self._bare_to_read()
        if touches is not None:
            for address in touches.tensors:
                tid = self.tensor_ids.known_address(address)
                if tid is not None:
                    dirty.add(tid)
            for pointer in touches.storages:
                sid = self.storage_ids.known_pointer(pointer)
                if sid is not None:
                    storages.add(sid)
                    if pointer in touches.exposed:
                        self.volatile.add(sid)
            self._mark_backward(touches.backward_nodes, touches.backward_leaves)
        storages |= self.volatile
        flips: dict[str, set[str]] = {}
        for tid in self._recheck:
            owner = self.keyed_owner.get(tid)
            if owner in self.nodes and self.tensor_ids.object(tid) is not None:
                flips.setdefault(owner, set()).add(tid)
        self._flips = flips
        for sid in storages:
            dirty.update(self.on_storage.get(sid, ()))
            dirty.update(self.saving.get(sid, ()))  # what it saved may now be "modified in place"
        for tid in [t for t in dirty if t in self.keyed_owner]:
            dirty.add(self.keyed_owner[tid])  # re-created on every access: read through its node

    def _bare_to_read(self) -> set[str]:
        """The storages met by their bytes only that must be read again now. Not one that a tensor it
        was met through still holds (it is the storage it was then: nothing freed it) whose size as
        read in the pass (estimated from the tensor: ``Reader._bare_nbytes``) is its object's and
        whose tensors in R all read it as its dtype: its fact and theirs stand, and what was written
        since is marked as any write is (the gradients of a pass, read again at the line's step
        after it: 8% of an Adam loop's reading)."""
        again = set()
        for sid, holder in self.storage_ids.bare_storages():
            known = self.storages.get(sid)
            if holder is None or known is None:
                again.add(sid)
                continue
            try:
                nbytes = holder.untyped_storage().nbytes()  # (met now anyway: _meet_bare_storages)
            except (RuntimeError, NotImplementedError, TypeError):
                nbytes = None
            dtype = known["dtype"]
            tensors = self.on_storage.get(sid, ())
            if nbytes != known["nbytes"] or any(self.tensors[t]["dtype"] != dtype for t in tensors):
                again.add(sid)
        return again

    def backward_marks(self, root: Any) -> tuple[set[Any], set[int]]:
        """(node keys, leaf addresses) a backward pass from ``root`` may change, read while the
        pass's roots are alive (``app.engine.run`` calls it as ``_engine_run_backward`` returns)."""
        node = root.grad_fn if isinstance(root, torch.Tensor) else getattr(root, "node", None)
        seen: set[int] = set()
        keys: set[Any] = set()
        leaves: set[int] = set()
        stack = [node] if node is not None else []
        while stack:
            current = stack.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            leaf = self._leaf(current)
            if leaf is not None:
                leaves.add(id(leaf))
            keys.add(self._key_of(current, leaf))
            stack.extend(fn for fn, _ in current.next_functions if fn is not None)
        return keys, leaves

    def _mark_backward(self, keys: set[Any], leaves: set[int]) -> None:
        """Nodes a backward pass ran through (saved tensors freed), the tensors they produced (a
        retained .grad), the leaves it wrote .grad of, and those grads (accumulated in place)."""
        if not keys and not leaves:
            return
        dirty = self._dirty
        ran = {nid for key in keys if (nid := self.node_ids.known_key(key)) is not None}
        dirty |= ran
        for nid in ran:
            dirty.update(p for p in self.parents.get(nid, ()) if p in self.tensors
                         and self.tensors[p]["grad_fn"] == nid)
        for address in leaves:
            tid = self.tensor_ids.known_address(address)
            if tid is not None:
                dirty.add(tid)
        for tid in list(dirty):
            fact = self.tensors.get(tid)
            grad = self.tensors.get(fact["grad"]) if fact is not None and fact["grad"] else None
            if grad is not None:
                dirty.add(fact["grad"])  # type: ignore[index]
                if grad["storage"] is not None:
                    self._dirty_storages.add(grad["storage"])

    def storage_fresh(self, sid: str, dtype: str, tid: str) -> bool:
        """Must a storage's fact be read again? The reader asks with the first tensor it reads on it
        (a tensor that may have changed may have resized its storage: read that again too)."""
        known = self.storages.get(sid)
        if self._whole_read or known is None or sid in self._dirty_storages or tid in self._dirty:
            return True
        if known["dtype"] != dtype:
            raise _Retry  # which tensor describes the storage would depend on the reading order
        return False

    def _leaf(self, node: Any) -> torch.Tensor | None:
        kind = type(node)
        has_variable = self.has_variable.get(kind)
        if has_variable is None:
            has_variable = self.has_variable[kind] = hasattr(node, "variable")
        variable = node.variable if has_variable else None
        return variable if isinstance(variable, torch.Tensor) else None

    # ---- the incremental step --------------------------------------------------------------------
    def _incremental(self, bound: dict[str, str], gone: list[str]) -> dict[str, Any] | None:
        if not (bound or gone or self._dirty or self._extra or self._extra_before or self._flips):
            # No name changed, nothing may have been written, nothing to recheck: there is nothing
            # to read, and every count stands (a loop's own line, a print: a third of a leak's steps).
            self._recheck = set()
            return {}
        journals = [ids.journal for ids in (self.tensor_ids, self.storage_ids, self.node_ids)]
        marks = [journal.mark() for journal in journals]
        try:
            plan = self._plan(bound, gone)
        except _Retry:
            for journal, mark in zip(journals, marks, strict=True):
                journal.rollback(mark)
            return None
        finally:
            for journal in journals:
                journal.commit()
        return self._commit(plan)

    def _plan(self, bound: dict[str, str], gone: list[str]) -> _Plan:
        dirty = self._dirty
        names: dict[str, str | None] = dict.fromkeys(gone)
        names.update(bound)
        roots = _Counts(self.roots)
        for name, new in names.items():
            old = self.names.get(name)
            if old is not None:
                roots.add(old, -1)
            if new is not None:
                roots.add(new, 1)
        members = _Members(self.tensors, self.nodes)
        reader = Reader(self, fresh=lambda ident: ident not in members or ident in dirty,
                        cap=_uncapped)
        # Roots first, in walk order: what new or rebound names reach, and named tensors that may
        # have changed — met in the order the whole snapshot meets them; then a backward step's own.
        seeds = set(bound.values()) | {t for t in dirty if roots.get(t)}
        named_now: dict[str, list[str]] = defaultdict(list)  # tensor -> the names this step bound to it
        for name, tid in names.items():
            if tid is not None:
                named_now[tid].append(name)
        for tid in sorted(seeds, key=lambda t: self._first_position(t, names, named_now)):
            obj = self.tensor_ids.object(tid)
            if obj is not None:
                reader.add_tensor(tid, obj)
        for ident, obj in self._extra:
            roots.add(ident, 1)
            if ident in members and ident not in dirty:
                continue
            seeds.add(ident)
            if ident.startswith("t"):
                reader.add_tensor(ident, obj)
            else:
                reader.add_node(ident, obj, self.node_keys.get(ident))
        reader.drain()
        found: dict[str, Any] = {}  # what _locate found, shared: one graph's nodes find each other
        for nid in sorted(self._flips, key=_id_order):
            if nid not in dirty and nid not in reader.nodes and not self._flip_known(reader, nid, found):
                dirty.add(nid)  # read it whole, below
        # Then what changed deeper in the graph.
        for ident in sorted((t for t in dirty - seeds if t in members), key=_id_order):
            self._read_again(reader, ident)
        plan = _Plan(reader, names, roots)
        self._settle(plan)
        if len(self.tensors) + len(reader.tensors) > MAX_TENSORS or \
                len(self.nodes) + len(reader.nodes) > MAX_NODES:
            raise _Retry  # near the caps, which objects get in depends on the whole reading order
        return plan

    def _flip_known(self, reader: Reader, nid: str, found: dict[str, Any]) -> bool:
        """A node whose saved copies were given ids of their own at the last step, and whose objects
        still live (a saved input's wrapper, kept while torch holds it): read again, it finds them
        known. Nothing else of it changed (it is not dirty), so rather than reading it whole, ask
        it for those slots only and file it as read with its fact as it stands and those slots
        "direct" — what reading it whole gives. False (read it whole) for any slot that is not
        plainly such a copy: a twin match, a copy that died, a custom Function's, one packed by a
        hook, one of a sequence."""
        fact = self.nodes[nid]
        kinds = self.saved_kinds.get(nid, {})
        tids = self._flips[nid]
        if "twin" in kinds.values():
            return False
        keyed = [name for name, kind in kinds.items() if kind == "keyed"]
        if not keyed or any(fact["saved"].get(name) not in tids or "[" in name for name in keyed):
            return False
        node = self._locate(nid, found)
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
        if self._flips_alone(nid, [fact["saved"][name] for name in keyed]):
            # Nothing but these kinds changes: file them now, without the node among what the step
            # read (its fact, edges and indexes stand; its settling and commit were a tenth of a leak).
            self.saved_kinds[nid] = now
            for name in keyed:
                del self.keyed_owner[fact["saved"][name]]
            return True
        reader.nodes[nid] = fact
        reader.objects[nid] = node
        reader.saved_kinds[nid] = now
        reader.node_keys.setdefault(nid, self.node_keys.get(nid))
        return True

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

    def _read_again(self, reader: Reader, ident: str) -> None:
        if ident in reader.tensors or ident in reader.nodes or ident in self.keyed_owner:
            return
        obj = self._locate(ident, {})
        if obj is None:
            return
        if ident.startswith("t"):
            reader.add_tensor(ident, obj)
        else:
            reader.add_node(ident, obj, self.node_keys.get(ident))
        reader.drain()

    def _settle(self, plan: _Plan) -> None:
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
            for nid in sorted(again, key=_id_order):
                self._dirty.add(nid)  # unchanged itself, but its twin match may have: read it anyway
                self._read_again(reader, nid)
                if nid not in reader.nodes:
                    raise _Retry
            pending, reader.deferred = reader.deferred, []
            for item in pending:
                reader.resolve(item, self._twin(reader, item, plan))
            reader.drain()
        raise _Retry

    def _twin(self, reader: Reader, item: Deferred, plan: _Plan) -> str | None:
        """The live tensor a re-created saved copy stands for (its node's own output first)."""
        if item.storage is None:
            return None
        twins = [(tid, fact) for tid, fact in self._on_storage_after(item.storage, plan)
                 if fact_signature(fact) == item.signature]
        own = [tid for tid, fact in twins if fact["grad_fn"] == item.nid]
        if len(own) > 1 or (not own and len(twins) > 1):
            raise _Retry  # the whole snapshot takes whichever it met first
        return own[0] if own else twins[0][0] if twins else None

    def _on_storage_after(self, storage: str, plan: _Plan) -> list[tuple[str, dict[str, Any]]]:
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

    def _rematch_needed(self, plan: _Plan) -> set[str]:
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
                if "keyed" in self.saved_kinds.get(nid, {}).values():
                    needed.add(nid)
        return {nid for nid in needed if nid not in reader.nodes and nid not in plan.removed}

    def _removals(self, plan: _Plan) -> set[str]:
        """Members that neither an edge from R nor a name reaches after the step (zero counts, cascaded)."""
        counts: dict[str, int] = {}

        def count(ident: str) -> int:
            found = counts.get(ident)
            if found is None:
                found = counts[ident] = plan.roots.get(ident, 0) + self.indegree.get(ident, 0)
            return found

        candidates: list[str] = []
        for ident, new in plan.edges.items():
            for target in self.edges.get(ident, ()):
                counts[target] = count(target) - 1
                candidates.append(target)
            for target in new:
                counts[target] = count(target) + 1
            if ident not in self.tensors and ident not in self.nodes:
                candidates.append(ident)  # read for the first time: is it reached at all?
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

    def _locate(self, ident: str, memo: dict[str, Any]) -> Any:
        """The live object of a member, found again from a parent in R (nodes have no other handle)."""
        if ident in memo:
            return memo[ident]
        memo[ident] = None
        if ident.startswith("t"):
            memo[ident] = self.tensor_ids.object(ident)
            return memo[ident]
        key = self.node_keys.get(ident)
        for parent in sorted(self.parents.get(ident, ()), key=_id_order):
            holder = self._locate(parent, memo)
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

    def _key_of(self, node: Any, leaf: Any = None) -> Any:
        """A node's identity key (``ids.NodeIds.key``); ``leaf``: its leaf, when already read."""
        leaf = leaf if leaf is not None else self._leaf(node)
        return self.node_ids.key(node, self.tensor_ids.known(key_leaf(leaf)) if leaf is not None else None)

    # ---- commit ----------------------------------------------------------------------------------
    def _commit(self, plan: _Plan) -> dict[str, Any]:
        reader = plan.reader
        delta = _empty_delta()
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
        for ident in sorted(plan.removed, key=_id_order):
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
        self._recheck = set(reader.keyed_owners)
        return _clean(delta)

    def _rekey_edges(self, reader: Reader, plan: _Plan) -> None:
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
            if old_sid is not None:
                self.on_storage[old_sid].discard(tid)
                moved.add(old_sid)
            if fact["storage"] is not None:
                self.on_storage[fact["storage"]].add(tid)
                moved.add(fact["storage"])
        self.tensors[tid] = fact
        self._check_cyclic(tid)
        for owner in self.parents.get(tid, ()):
            self._check_cyclic(owner)

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

    # ---- a whole snapshot ------------------------------------------------------------------------
    def _whole(self) -> dict[str, Any]:
        self._whole_read = True
        try:
            reader = Reader(self, fresh=_always, cap=self._cap)
            variables: dict[str, str] = {}
            for name, tid in self.walker.ordered():
                obj = self.tensor_ids.object(tid)
                if obj is None:
                    continue
                reader.add_tensor(tid, obj)
                if tid in reader.tensors:  # past MAX_TENSORS a name would point at nothing
                    variables[name] = tid
            for ident, obj in self._extra:  # a backward step's node and gradients
                if ident.startswith("t"):
                    reader.add_tensor(ident, obj)
                else:
                    reader.add_node(ident, obj, self.node_keys.get(ident))
            reader.drain()
            reader.match()
        finally:
            self._whole_read = False
        return self._replace(reader, variables)

    def _cap(self, kind: str, count: int) -> bool:
        """May a whole read take one more object of this kind? (Past the cap, the step says so.)"""
        limit = MAX_TENSORS if kind == "tensors" else MAX_NODES
        if count < limit:
            return True
        self._capped[kind] = limit
        return False

    def _replace(self, reader: Reader, variables: dict[str, str]) -> dict[str, Any]:
        """Make R the whole snapshot's, and say how it differs from before."""
        delta = _empty_delta()
        pairs = (("variables", variables, self.variables), ("tensors", reader.tensors, self.tensors),
                 ("storages", reader.storages, self.storages), ("nodes", reader.nodes, self.nodes))
        for kind, now, before in pairs:
            delta[kind] = {k: v for k, v in now.items() if before.get(k) != v}
            delta["dropped"][kind] = [k for k in before if k not in now]
        for nid in delta["dropped"]["nodes"]:
            self.node_ids.retire(self.node_keys.get(nid))
        self.tensors, self.nodes = dict(reader.tensors), dict(reader.nodes)
        self.storages = dict(reader.storages)
        self.variables = variables
        self.names = dict(self.walker.current)
        self.node_keys = {nid: reader.node_keys.get(nid, self.node_keys.get(nid)) for nid in self.nodes}
        self.saved_kinds = {nid: reader.saved_kinds.get(nid, {}) for nid in self.nodes}
        self._rebuild()
        self._recheck = set(reader.keyed_owners)
        return _clean(delta)

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


class _Counts:
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


class _Members:
    """``ident in members``: is it in R (before this step)? Without building a set of all of R."""

    __slots__ = ("_nodes", "_tensors")

    def __init__(self, tensors: dict[str, Any], nodes: dict[str, Any]) -> None:
        self._tensors, self._nodes = tensors, nodes

    def __contains__(self, ident: object) -> bool:
        return ident in self._tensors or ident in self._nodes


def _always(_ident: str) -> bool:
    return True


def _uncapped(_kind: str, _count: int) -> bool:
    return True
