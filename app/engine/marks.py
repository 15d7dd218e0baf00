"""What may have changed since the last step, for ``SnapshotTaker`` (``app.engine.snapshot``).

A line's torch calls (``app.engine.watch.Touches``), a backward pass's nodes and leaves, storages
whose memory Python code may write, and saved copies worth a second look are turned here into the
step's dirty sets: the tensors and nodes of R to read again, the storages whose fact must be read
again. A mixin: the state is the taker's (its ``__init__``).
"""

from __future__ import annotations

from typing import Any

import torch

from app.engine.backward import NodeRan, freed_message, tensor_saves
from app.engine.ids import key_leaf, tensor_pointer
from app.engine.plan import Retry
from app.engine.watch import Touches


class Marks:
    """The taker's marking: its dirty sets from what the line and a backward pass touched."""

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
        # (a tensor it was met through that lives on out of R — a gradient gradcheck keeps, met
        # again in its next pass — holds the storage too: its id must hold as well)
        holders = dict(self.storage_ids.bare_storages())
        for pointer, sid in self.storage_ids.take_bare_pointers().items():
            tensors = [self.tensor_ids.object(tid) for tid in self.on_storage.get(sid, ())]
            for tensor in [*tensors, holders.get(sid)]:
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
        if self.counter_links and self._mark_linked(storages):
            # a slot refused as modified in place names its counter's version, wherever the memory
            # it was filed under went since (few nodes: read them all again)
            dirty.update(self.stale_saves)
        elif self.stale_saves and storages:
            # ... and one filed under memory that left R (its saved view dropped) can be reached by
            # a write through a tensor of its counter elsewhere: read those again at any write
            dirty.update(nid for nid, sids in self.stale_saves.items()
                         if any(sid not in self.storages for sid in sids))
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

    def _mark_linked(self, storages: set[str]) -> bool:
        """A storage whose tensors may share a version counter with a dirty one's (``counter_links``)
        may have had versions moved by the same write: its tensors, and the nodes that saved from it
        (a weight's ``.t()`` an addmm saved, after ``vector_to_parameters`` moved the weight), are
        read again too, and its links in turn. True when a linked storage is among them."""
        links = self.counter_links
        queue = [sid for sid in storages if sid in links]
        while queue:
            for other in links.get(queue.pop(), ()):
                if other not in storages:
                    storages.add(other)
                    queue.append(other)
        return any(sid in links for sid in storages)

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
        nodes, tensors = self.nodes, self.tensors
        for nid in ran:
            node = nodes.get(nid)
            if node is not None and node["variable"] is not None:
                # An AccumulateGrad is no tensor's grad_fn, and its parents are every kept graph's
                # nodes that reach its leaf (a hundred in a kept Adam loop): none to look through.
                continue
            # (only one that retains its grad changes as its node runs: its .grad; torch retains the
            # grad of a non-leaf ``inputs=`` one as the pass starts, which reads it: run.on_backward)
            dirty.update(p for p in self.parents.get(nid, ())
                         if p in tensors and tensors[p]["grad_fn"] == nid and tensors[p]["retains_grad"])
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
            raise Retry  # which tensor describes the storage would depend on the reading order
        return False

    def _leaf(self, node: Any) -> torch.Tensor | None:
        kind = type(node)
        has_variable = self.has_variable.get(kind)
        if has_variable is None:
            has_variable = self.has_variable[kind] = hasattr(node, "variable")
        variable = node.variable if has_variable else None
        return variable if isinstance(variable, torch.Tensor) else None

    def _key_of(self, node: Any, leaf: Any = None) -> Any:
        """A node's identity key (``ids.NodeIds.key``); ``leaf``: its leaf, when already read."""
        leaf = leaf if leaf is not None else self._leaf(node)
        return self.node_ids.key(node, self.tensor_ids.known(key_leaf(leaf)) if leaf is not None else None)
