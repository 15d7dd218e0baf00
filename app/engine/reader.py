"""Reading the facts of live tensors, storages and graph nodes for one step, breadth first.

Ids are handed out in the order this reader first meets objects — variables in walk order, then
(round after round) the tensors queued, the nodes queued, and last the saved tensors torch re-creates
on every access (matched to a live twin, else given a stable id).
A ``Reader`` is told which objects it may skip (``fresh(id)`` is False: known and unchanged, their
earlier fact stands), so the same code serves the whole snapshot and the incremental one.

It holds user objects only while one step is read; what it returns is strings and numbers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from app.engine.hooks import metadata_keys, node_hooks
from app.engine.ids import key_leaf
from app.engine.members import object_dict
from app.engine.saved import Deferred, SavedSlots, fact_signature, saved_names
from app.engine.tensor_facts import TensorFacts


class Reader(TensorFacts, SavedSlots):
    """Reads one step. ``run`` is the engine's state across steps (ids, caches: ``SnapshotTaker``).
    Tensors and storages are read by ``TensorFacts`` (app.engine.tensor_facts), a node's saved slots
    by ``SavedSlots`` (app.engine.saved); nodes here."""

    def __init__(self, run: Any, fresh: Callable[[str], bool], cap: Callable[[str, int], bool]) -> None:
        self.run = run
        self.fresh = fresh  # must this object be read at this step?
        self.cap = cap  # may one more object of this kind ("tensors"/"nodes") be read?
        self.tensors: dict[str, dict[str, Any]] = {}
        self.storages: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.node_keys: dict[str, Any] = {}  # node id -> the identity key it was found under
        self.objects: dict[str, Any] = {}  # what was read, for this step only
        self._tensor_queue: deque[tuple[str, torch.Tensor]] = deque()
        self._node_queue: deque[tuple[str, Any]] = deque()
        self.deferred: list[Deferred] = []
        # storage id -> (dtype it was read as, its converted elements): a contiguous tensor's values
        # are a slice of these, which spares reading and converting the same numbers twice.
        self._storage_reads: dict[str, tuple[torch.dtype, list[Any]]] = {}
        self.by_storage: dict[str, list[str]] = {}  # storage -> tensors read on it, in order
        # node -> saved name -> how its tensor was found: "direct" (the object torch keeps),
        # "twin" (a fresh copy matched to a live tensor), "keyed" (a fresh copy with its own id)
        self.saved_kinds: dict[str, dict[str, str]] = {}
        self.keyed_owners: dict[str, str] = {}  # keyed id -> the node that saved it
        # node -> storages of the tensors it saved that torch now refuses as modified in place
        self.stale_saves: dict[str, set[str]] = {}

    # ---- ids, in meeting order -------------------------------------------------------------------
    def tensor_id(self, tensor: torch.Tensor) -> str:
        tid = self.run.tensor_ids.of(tensor)
        self.add_tensor(tid, tensor)
        return tid

    def add_tensor(self, tid: str, tensor: torch.Tensor) -> None:
        if tid not in self.tensors and self.fresh(tid) and self.cap("tensors", len(self.tensors)):
            self.tensors[tid] = {}  # placeholder: filled when dequeued
            self.objects[tid] = tensor
            self._tensor_queue.append((tid, tensor))

    def node_id(self, node: Any) -> str:
        ids = self.run.node_ids
        leaf = self._leaf_of(node)
        key = ids.key(node, self.run.tensor_ids.known(key_leaf(leaf)) if leaf is not None else None)
        nid = ids.of_key(key)
        self.add_node(nid, node, key)
        return nid

    def add_node(self, nid: str, node: Any, key: Any) -> None:
        self.node_keys.setdefault(nid, key)
        if nid not in self.nodes and self.fresh(nid) and self.cap("nodes", len(self.nodes)):
            self.nodes[nid] = {}
            self.objects[nid] = node
            self._node_queue.append((nid, node))

    def add(self, ident: str, obj: Any, key: Any = None) -> None:
        """Queue a member known by its id (a tensor's ``t…``, else a node's, with its identity key)."""
        if ident.startswith("t"):
            self.add_tensor(ident, obj)
        else:
            self.add_node(ident, obj, key)

    def _leaf_of(self, node: Any) -> torch.Tensor | None:
        kind = type(node)
        has_variable = self.run.has_variable.get(kind)
        if has_variable is None:
            has_variable = self.run.has_variable[kind] = hasattr(node, "variable")
        if not has_variable:
            return None
        variable = node.variable
        return variable if isinstance(variable, torch.Tensor) else None

    # ---- the breadth-first read ------------------------------------------------------------------
    def drain(self) -> None:
        """Describe everything queued (tensors, then nodes, round after round)."""
        while self._tensor_queue or self._node_queue:
            while self._tensor_queue:
                tid, tensor = self._tensor_queue.popleft()
                self.tensors[tid] = self._tensor_fact(tid, tensor)
            while self._node_queue:
                nid, node = self._node_queue.popleft()
                self.nodes[nid] = self._node_fact(nid, node)

    def match(self) -> None:
        """Give every deferred saved tensor its id: the live twin it stands for (a tensor read at
        this step with the same storage, shape, strides, offset and dtype, its own output first),
        else a stable id of its own. Matching can queue new tensors, so it alternates with ``drain``.
        """
        while self.deferred:
            pending, self.deferred = self.deferred, []
            for item in pending:
                if self.resolve_known(item):
                    continue
                twins = [(t, self.tensors[t]) for t in self.by_storage.get(item.storage or "", ())]
                same = [t for t, fact in twins if fact_signature(fact) == item.signature]
                own = [t for t in same if self.tensors[t]["grad_fn"] == item.nid]
                pool = own or same
                before = self.twin_before(item)
                self.resolve(item, before if before in pool else (pool or [None])[0])
            self.drain()

    def twin_before(self, item: Deferred) -> str | None:
        """The twin this saved copy was matched to at the last step, kept while it is still one of the
        best alike: torch hands out a fresh copy that is none of them, so any is true, and the first
        met in reading order changed with each backward step's node and gradients, read first (a
        jacobian's TanhBackward0 result shown as each TanhBackwardBackward0's copy in turn)."""
        if self.run.saved_kinds.get(item.nid, {}).get(item.name) != "twin":
            return None
        return self.run.nodes.get(item.nid, {}).get("saved", {}).get(item.name)

    def resolve_known(self, item: Deferred) -> bool:
        """Fill a deferred saved entry with the object itself when it got an id later in the step:
        a saved input is the very tensor torch holds, not a copy, and it was deferred only because
        the node was read before what else reaches it (``hvp``'s detached input, met through its
        AccumulateGrad after the SinBackward0 that saved it): whichever is read first, the node
        shows the tensor it holds, never an alike twin on the same storage."""
        tid = self.run.tensor_ids.known(item.tensor)
        if tid is None:
            return False
        self.saved_kinds.setdefault(item.nid, {})[item.name] = "direct"
        item.fact["saved"][item.name] = self.tensor_id(item.tensor)
        return True

    def resolve(self, item: Deferred, twin: str | None) -> str:
        """Fill a deferred saved entry with ``twin``, or (None) the fresh object's own stable id."""
        kinds = self.saved_kinds.setdefault(item.nid, {})
        if twin is not None:
            kinds[item.name] = "twin"
            item.fact["saved"][item.name] = twin
            return twin
        ids = self.run.tensor_ids
        tid = ids.keyed((item.nid, item.name))
        # Register the fresh object under the keyed id so that its fact describes it.
        ids.alias(item.tensor, tid)
        kinds[item.name] = "keyed"
        self.keyed_owners[tid] = item.nid
        self.add_tensor(tid, item.tensor)
        item.fact["saved"][item.name] = tid
        return tid

    # ---- facts -----------------------------------------------------------------------------------

    def _node_fact(self, nid: str, node: Any) -> dict[str, Any]:
        fact: dict[str, Any] = {
            "name": type(node).__name__,  # what print(grad_fn) shows: AccumulateGrad, not torch::autograd::…
            "next": [self.node_id(fn) if fn is not None else None for fn, _ in node.next_functions],
            "variable": None,
            "saved": {},
            "saved_errors": {},
        }
        leaf = self._leaf_of(node)
        if leaf is not None:
            fact["variable"] = self.tensor_id(leaf)
            key = self.run.node_ids.key(node, self.run.tensor_ids.known(key_leaf(leaf)))
            if self.node_keys.get(nid) != key:  # met before its leaf had an id: file it under the leaf
                self.run.node_ids.also(key, nid, self.node_keys.get(nid))
                self.node_keys[nid] = key
        keys = metadata_keys(node)  # (NodeFact's, left out when empty, as the schema leaves them out)
        if keys:
            fact["metadata"] = keys
        hooks = node_hooks(node, leaf)
        if hooks:
            fact["hooks"] = hooks
        for attribute in saved_names(node, self.run.saved_names):
            self._read_saved(fact, nid, node, attribute)
        if isinstance(node, BackwardCFunction):  # a custom Function: what the snippet kept on ctx
            for attribute, value in object_dict(node).items():
                self._add_saved(fact, nid, f"ctx.{attribute}", value, held=True)
        return fact
