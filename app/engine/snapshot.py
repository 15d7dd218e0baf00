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
reading order (and at every step while a storage met through tensors of two dtypes is in ``R``: a
complex tensor and its real view), while a cap on the objects read holds, when a line may change
tensors behind torch's back (``Tensor.set_``), and at every step with ``full=True`` — what the tests
hold the incremental snapshots to. The ids of objects first met in the same step may be numbered
in another order than a whole snapshot would number them (ids are opaque; the tests compare traces
with ids renamed by first reach).

This module holds the taker's state, its step and its whole snapshot; the incremental step's parts
are mixins over that state: ``marks`` (what may have changed), ``plan`` (read and settle, nothing of
R changed yet), ``commit`` (R's facts, edges, counts and indexes written from a plan, or rebuilt).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from app.engine.arrays import ArrayReader
from app.engine.backward import NodeRan
from app.engine.commit import Commit, clean_delta, empty_delta
from app.engine.ids import NodeIds, ObjectIds, StorageIds
from app.engine.marks import Marks
from app.engine.names import NameWalker
from app.engine.plan import Planning, Retry
from app.engine.reader import Reader
from app.engine.values import ValueWriter
from app.engine.watch import Touches

MAX_TENSORS = 20_000
MAX_NODES = 20_000

_functorch_level = torch._C._functorch.maybe_current_level  # None outside torch.func transforms


class SnapshotTaker(Marks, Planning, Commit):
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
        self.stale_saves: dict[str, set[str]] = {}  # node -> storages of slots refused as modified
        self.matched_by: dict[str, set[str]] = defaultdict(set)  # twin -> nodes matched to it
        self.keyed_owner: dict[str, str] = {}  # saved tensor torch re-creates -> its node
        self.volatile: set[str] = set()  # storages whose memory Python code may write
        # storage -> storages whose tensors may share version counters with its own: ``w.data = ...``
        # and ``set_`` move a tensor to new memory with its counter, which its old aliases keep
        self.counter_links: dict[str, set[str]] = {}
        self.cyclic: set[str] = set()  # tensors whose .grad has a graph of its own
        # Storages read through tensors of another dtype than they were described with (a complex
        # tensor's .real, view_as_real, x.view(torch.int32)): a storage's fact is written in the dtype
        # of the first tensor met on it, so what the whole snapshot says of it depends on the order
        # it meets them in, which moves from step to step (a backward step's gradients first): while
        # one is in R, every step is read whole.
        self.mixed_dtypes: set[str] = set()
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
        self._stable: set[str] = set()  # of those, whose slots hand out the same object (_note_recheck)
        self._flips: dict[str, set[str]] = {}  # this step: node -> its rechecked copies (_flip_known)
        # What a backward step adds to the names as roots (the node that ran, its gradients), and
        # what the previous step added: without their names, are they still reached?
        self._extra: list[tuple[str, Any]] = []
        self._extra_before: set[str] = set()
        self._capped: dict[str, int] = {}  # caps the whole read of this step reached
        self._capped_last = False
        self.in_backward = False  # reading inside a backward pass: no storage objects (ids.tensor_pointer)
        # Within a backward pass, between node steps where no snippet code ran: tensor id -> (its fact,
        # its storage's fact as read with it, the storage size its values were checked against), for
        # gradients read again at the same version (tensor_facts.TensorFacts._as_passed). None
        # outside node steps.
        self.pass_facts: dict[str, tuple[dict[str, Any], Any, int]] | None = None
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
            if ran is None:
                self.pass_facts = None
            elif not names_still or self.pass_facts is None:
                self.pass_facts = {}
            if ran is not None:
                self._node_ran(ran, touches)
            self._mark(touches, after_pass=not in_pass)
            delta = None
            # Inside a torch.func transform (and at the step it ends), what a wrapper tensor or an
            # AccumulateGrad's variable reads as depends on the transform's level at the moment of
            # reading, which no call marks: read whole.
            transformed = _functorch_level() is not None
            in_transform, self._in_transform = transformed or self._in_transform, transformed
            if self.mixed_dtypes:
                self.mixed_dtypes = {sid for sid in self.mixed_dtypes if sid in self.storages}
            # (while a cap holds, which objects get in depends on the whole reading order: read whole)
            if not (self.full or self.cyclic or self._capped_last or in_transform or self.mixed_dtypes
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

    # ---- the incremental step --------------------------------------------------------------------
    def _incremental(self, bound: dict[str, str], gone: list[str]) -> dict[str, Any] | None:
        if not (bound or gone or self._dirty or self._extra or self._extra_before or self._flips):
            # No name changed, nothing may have been written, nothing to recheck: there is nothing
            # to read, and every count stands (a loop's own line, a print: a third of a leak's steps).
            self._recheck = set()
            return {}
        within_caps = len(self.tensors) <= MAX_TENSORS and len(self.nodes) <= MAX_NODES  # (else: whole)
        if within_caps and self._names_only(bound, gone):
            return self._bind_names(bound)
        journals = [ids.journal for ids in (self.tensor_ids, self.storage_ids, self.node_ids)]
        marks = [journal.mark() for journal in journals]
        try:
            plan = self._plan(bound, gone)
            reader = plan.reader
            if len(self.tensors) + len(reader.tensors) > MAX_TENSORS or \
                    len(self.nodes) + len(reader.nodes) > MAX_NODES:
                raise Retry  # near the caps, which objects get in depends on the whole reading order
        except Retry:
            for journal, mark in zip(journals, marks, strict=True):
                journal.rollback(mark)
            if self.pass_facts is not None:
                self.pass_facts = {}  # (facts of this attempt may name ids it handed out, now undone)
            return None
        finally:
            for journal in journals:
                journal.commit()
        return self._commit(plan)

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
                reader.add(ident, obj, self.node_keys.get(ident))
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
        delta = empty_delta()
        pairs = (("variables", variables, self.variables), ("tensors", reader.tensors, self.tensors),
                 ("storages", reader.storages, self.storages), ("nodes", reader.nodes, self.nodes))
        for kind, now, before in pairs:
            delta[kind] = {k: v for k, v in now.items() if before.get(k) != v}
            delta["dropped"][kind] = [k for k in before if k not in now]
        for nid in delta["dropped"]["nodes"]:
            self.node_ids.retire(self.node_keys.get(nid))
        for tid, fact in reader.tensors.items():
            old = self.tensors.get(tid)
            if old is not None and old["storage"] != fact["storage"]:
                self._link_counters(old["storage"], fact["storage"])
        self.tensors, self.nodes = dict(reader.tensors), dict(reader.nodes)
        self.storages = dict(reader.storages)
        self._prune_links()
        self.variables = variables
        self.names = dict(self.walker.current)
        self.node_keys = {nid: reader.node_keys.get(nid, self.node_keys.get(nid)) for nid in self.nodes}
        self.saved_kinds = {nid: reader.saved_kinds.get(nid, {}) for nid in self.nodes}
        self.stale_saves = {nid: reader.stale_saves[nid] for nid in self.nodes if nid in reader.stale_saves}
        self._rebuild()
        self._note_recheck(reader)
        return clean_delta(delta)


def _always(_ident: str) -> bool:
    return True
