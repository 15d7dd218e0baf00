"""Reading the facts of live tensors, storages and graph nodes for one step, breadth first.

Ids are handed out in the order this reader first meets objects — variables in walk order, then
(round after round) the tensors queued, the nodes queued, and last the saved tensors torch re-creates
on every access (matched to a live twin, else given a stable id).
A ``Reader`` is told which objects it may skip (``fresh(id)`` is False: known and unchanged, their
earlier fact stands), so the same code serves the whole snapshot and the incremental one.

It holds user objects only while one step is read; what it returns is strings and numbers.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from app.engine.cuda_on_cpu import SIMULATING, device_of
from app.engine.hooks import metadata_keys, node_hooks
from app.engine.ids import key_leaf, tensor_pointer
from app.engine.members import iterate_sequence, kind_of, object_dict
from app.engine.values import MAX_VALUES, nest

SAVED_PREFIX = "_saved_"
MAX_CONTAINER_ITEMS = 256
# Accessing a saved tensor after backward released it raises this, and always will again.
FREED_PREFIX = "Trying to backward through the graph a second time"


def short_message(error: BaseException) -> str:
    """torch's message up to its first full stop: the fact, without the hint that follows."""
    text = str(error).split("\n")[0]
    head, stop, _ = text.partition(". ")
    return (head + "." if stop else text)[:1000]


def saved_names(node: Any, cache: dict[type, tuple[str, ...]]) -> tuple[str, ...]:
    """The attributes of a node that unpack saved tensors: ``_saved_*`` for torch's own nodes,
    ``saved_tensors`` for a snippet's ``autograd.Function`` (what ``ctx.save_for_backward`` kept).
    Of torch's, those its node type gives a ``_raw_saved_*`` twin: torch's code generator makes one
    for every saved variable (a tensor, an optional one, a list of them) and for nothing else, so the
    others hold sizes, strides and scalars — never a tensor nor an error after backward (checked on
    torch's own nodes by tests/engine) — and reading them was a fifth of reading an ``addmm`` node."""
    kind = type(node)
    names = cache.get(kind)
    if names is None:
        found = [a for a in dir(node) if a.startswith(SAVED_PREFIX) and hasattr(kind, "_raw" + a)]
        if isinstance(node, BackwardCFunction):
            found.append("saved_tensors")
        names = cache[kind] = tuple(found)
    return names


def packed_by_hooks(node: Any, attribute: str) -> Any:
    """What ``saved_tensors_hooks`` packed for this saved value, or None when no hook is involved."""
    raw_name = _RAW_NAMES.get(attribute)
    if raw_name is None:
        raw_name = _RAW_NAMES[attribute] = \
            "_raw" + attribute if attribute.startswith(SAVED_PREFIX) else "_raw_" + attribute
    try:
        raw = getattr(node, raw_name, None)
    except RuntimeError:  # freed by backward: the plain read reports it
        return None
    # No hook, or save_on_cpu's: reading it is its accessor, which changes nothing. Any other unpack
    # hook is not ours to call: the snippet's may print or count, and torch's own may do work that
    # counts as the unpack (non-reentrant checkpoint recomputes the forward, and raises when
    # backward then unpacks a second time).
    if not isinstance(raw, list | tuple):  # one saved value, the common case
        return None if _no_unpack_hook(raw) else raw.data
    if all(_no_unpack_hook(item) for item in raw):
        return None
    return [item.data for item in raw]


def _no_unpack_hook(raw: Any) -> bool:
    hook = getattr(raw, "unpack_hook", None)
    return hook is None or getattr(hook, "__code__", None) is _SAVE_ON_CPU_UNPACK


_RAW_NAMES: dict[str, str] = {}  # saved attribute -> the attribute of its unpacked-free form
_SAVE_ON_CPU_UNPACK = getattr(torch.autograd.graph.save_on_cpu().unpack_hook, "__code__", None)


def packed_message(packed: Any) -> str:
    """What a saved slot shows when a pack hook kept something other than tensors."""
    if type(packed).__module__ == "torch.utils.checkpoint":
        return "Not kept: torch.utils.checkpoint recomputes it during backward."
    return f"Packed as a {type(packed).__name__} by a saved_tensors_hooks pack function."


def _grad_of(t: torch.Tensor, is_leaf: bool) -> torch.Tensor | None:
    """``.grad``: on leaves, on tensors that retain grad, and on any other tensor the snippet gave
    one. torch warns (or, under a "warnings as errors" filter, raises) when a non-leaf has none;
    the warning is ours, not the snippet's (and goes nowhere: output is discarded while we read)."""
    if is_leaf or t.retains_grad:
        return t.grad
    try:
        return t.grad
    except Exception:  # noqa: BLE001 - the warning raised as an error: it has no grad
        return None


_DTYPE_NAMES: dict[torch.dtype, str] = {}
_STRIDED = torch.strided


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: formatted once per dtype (str() of a dtype is a Python-level
    call, paid at every tensor and storage read otherwise)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def device_name(t: torch.Tensor) -> str:
    # ``t.device`` makes a device object and str() formats it (2.5 µs a read); nearly every tensor
    # here is on the CPU, which a flag says (or cuda:0, simulated there: app.engine.cuda_on_cpu).
    if t.is_cpu:
        return device_of(t) if SIMULATING else "cpu"
    return str(t.device)


def _strides_if_any(t: torch.Tensor) -> list[int]:
    """A sparse COO tensor's strides as torch gives them (``(0, 0)``); CSR and its kin have none."""
    try:
        return list(t.stride())
    except RuntimeError:
        return []


def signature(t: torch.Tensor, grad_fn: str | None) -> tuple:
    """What a live twin of a re-created saved copy must share with it (conj and neg bits included:
    ``exp``'s saved result is not its conjugated twin), its node (``grad_fn``, its id) and grad-ness
    among them: a sigmoid's saved result is not the ``y.detach()`` kept beside it, and one call's
    ``weight.t()`` is not the next call's, though each lies over the same bytes the same way."""
    return (list(t.shape), list(t.stride()), t.storage_offset(), dtype_name(t.dtype),
            t.is_conj(), t.is_neg(), grad_fn, t.requires_grad)


def fact_signature(fact: dict[str, Any]) -> tuple:
    return (fact["shape"], fact["stride"], fact["storage_offset"], fact["dtype"], fact["is_conj"],
            fact["is_neg"], fact["grad_fn"], fact["requires_grad"])


@dataclass
class Deferred:
    """A saved tensor torch handed out as a fresh object: matched to a twin once the step is read."""

    fact: dict[str, Any]  # the node's fact, whose ``saved[name]`` it fills
    name: str
    nid: str
    tensor: torch.Tensor
    storage: str | None  # its storage id (None: it has none)
    signature: tuple


class Reader:
    """Reads one step. ``run`` is the engine's state across steps (ids, caches: ``Observer``)."""

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
                twins = [(t, self.tensors[t]) for t in self.by_storage.get(item.storage or "", ())]
                same = [t for t, fact in twins if fact_signature(fact) == item.signature]
                own = [t for t in same if self.tensors[t]["grad_fn"] == item.nid]
                self.resolve(item, (own or same or [None])[0])
            self.drain()

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
    def _tensor_fact(self, tid: str, t: torch.Tensor) -> dict[str, Any]:
        # (Each property read once here and handed to what needs it: every torch call is a C++ round
        # trip, and every helper a Python call; this runs for every tensor every step reads.)
        unavailable: dict[str, str] = {}
        try:
            strided = t.layout is _STRIDED
            shape = list(t.shape)
            if strided:
                stride, offset = list(t.stride()), t.storage_offset()
            else:
                stride, offset = _strides_if_any(t), 0
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
            # a lazy module's uninitialised parameter, a nested tensor: no shape or strides to read
            strided, shape, stride, offset = False, [], [], 0
            unavailable["shape"] = short_message(error)
        dtype = t.dtype
        dtype_text = _DTYPE_NAMES.get(dtype) or dtype_name(dtype)
        conj, neg = t.is_conj(), t.is_neg()
        storage_id = self._storage(t, tid, dtype, dtype_text, conj or neg) if not unavailable else None
        if storage_id is not None:
            on_storage = self.by_storage.get(storage_id)
            if on_storage is None:
                self.by_storage[storage_id] = [tid]
            else:
                on_storage.append(tid)
            described = self.storages.get(storage_id) or self.run.storages.get(storage_id)
            if described is not None and described["dtype"] != dtype_text:
                self.run.mixed_dtypes.add(storage_id)  # (SnapshotTaker.mixed_dtypes)
        try:
            version: int | None = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = None
        grad_fn = t.grad_fn
        is_leaf = t.is_leaf
        retains_grad = t.retains_grad
        grad = t.grad if is_leaf or retains_grad else _grad_of(t, is_leaf)
        base = t._base
        fact = {
            "shape": shape,
            "dtype": dtype_text,
            "stride": stride,
            "storage_offset": offset,
            "storage": storage_id,
            "requires_grad": t.requires_grad,
            "is_leaf": is_leaf,
            "grad_fn": self.node_id(grad_fn) if grad_fn is not None else None,
            "grad": self.tensor_id(grad) if grad is not None else None,
            "base": self.tensor_id(base) if base is not None else None,
            "version": version,
            "values": None,
            "summary": None,
            "is_view": t._is_view(),
            "retains_grad": retains_grad,
            "is_inference": False,
            "device": "cpu" if t.is_cpu and not SIMULATING else device_name(t),
            "is_conj": conj,
            "is_neg": neg,
            "unavailable": unavailable,
        }
        if not unavailable:
            try:
                fact["is_inference"] = t.is_inference()
                numel = t.numel()
                if not strided or self._within_storage(t, storage_id, shape, stride, offset, numel):
                    fact["values"] = self._values(t, storage_id, shape, offset, numel, dtype, conj or neg)
                    if numel > MAX_VALUES:
                        fact["summary"] = self.run.values.summary(t)
                else:
                    unavailable["values"] = "its view reaches past the end of its storage (resized smaller)"
            except (RuntimeError, ValueError, TypeError, NotImplementedError) as error:
                unavailable["values"] = short_message(error)
        return fact

    def _within_storage(self, t: torch.Tensor, storage_id: str | None, shape: list[int], stride: list[int],
                        offset: int, numel: int) -> bool:
        """Reading past a storage's end reads freed memory (a view of a storage ``resize_``-d
        smaller can crash the process): check the extent against the storage's size first, from a
        strided tensor's shape, stride and storage offset as read."""
        if storage_id is None or numel == 0:
            return True
        storage = self.storages.get(storage_id) or self.run.storages.get(storage_id)
        if storage is None:
            return True
        last = offset
        for size, step in zip(shape, stride, strict=True):
            last += (size - 1) * step
        return (last + 1) * t.element_size() <= storage["nbytes"]

    def _values(self, t: torch.Tensor, storage_id: str | None, shape: list[int], offset: int, numel: int,
                dtype: torch.dtype, lazy: bool) -> Any:
        """Its values: a slice of its storage's, when those were read at this step and it lies in
        them in order (``lazy``: conjugate or negative bits, which read differently); the very list
        when it is the whole storage (nothing changes a fact's values once read)."""
        read = self._storage_reads.get(storage_id) if storage_id is not None else None
        if read is not None and 0 < numel <= MAX_VALUES and not lazy and read[0] == dtype \
                and t.is_contiguous():
            elements = read[1]
            if offset == 0 and numel == len(elements):
                return nest(elements, shape)
            flat = elements[offset : offset + numel]
            if len(flat) == numel:
                return nest(flat, shape)
        return self.run.values.tensor_values(t)

    def _storage(self, t: torch.Tensor, tid: str, dtype: torch.dtype, dtype_text: str,
                 lazy: bool) -> str | None:
        """``t``'s storage id, its fact read if it must be (``lazy``: ``t`` has conjugate or negative
        bits, so the elements read, as the memory holds them, are not a slice of its values)."""
        run = self.run
        ids = run.storage_ids
        pointer = tensor_pointer(t) if run.in_backward else 0
        if pointer:  # during a backward pass: known by its bytes only (see ids.tensor_pointer)
            storage, sid = None, ids.of_pointer(pointer, t, self.keyed_owners.get(tid))
        else:
            try:
                storage = t.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):  # sparse and other storage-less layouts
                return None
            sid = ids.of_storage(storage)
        if sid not in self.storages and run.storage_fresh(sid, dtype_text, tid):
            if storage is not None and not storage.resizable():
                # memory torch did not allocate (torch.frombuffer over a bytearray, from_numpy,
                # from_dlpack): its owner may write it with no torch call to see — read it again
                # at every step, as the memory handed to Python is (watch: exposed)
                run.volatile.add(sid)
            nbytes = storage.nbytes() if storage is not None else self._bare_nbytes(sid, t)
            element_size = t.element_size()
            elements = run.values.storage_values(t, nbytes, element_size, dtype, lazy)
            if elements is not None and not lazy:
                self._storage_reads[sid] = (dtype, elements)
            self.storages[sid] = {
                "nbytes": nbytes,
                "element_size": element_size,
                "dtype": dtype_text,
                "values": elements,
            }  # (where its bytes are: noted by ids.of_storage already)
        return sid

    def _bare_nbytes(self, sid: str, t: torch.Tensor) -> int:
        """A storage known only by its bytes: its size as last read, else what ``t`` spans of it."""
        known = self.run.storages.get(sid)
        if known is not None:
            return known["nbytes"]
        span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) if t.numel() else 0
        return (t.storage_offset() + span) * t.element_size()

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

    def _read_saved(self, fact: dict[str, Any], nid: str, node: Any, attribute: str) -> None:
        name = attribute.removeprefix(SAVED_PREFIX)
        freed = self.run.freed.get(nid)
        if freed is not None and name in freed:
            fact["saved"][name] = None
            fact["saved_errors"][name] = freed[name]
            return
        packed = packed_by_hooks(node, attribute)
        if packed is not None:
            # Unpacking would call the snippet's own unpack hook (and print, count...): show what the
            # graph actually holds, the packed value, instead.
            if kind_of(packed) in ("tensor", "sequence"):
                self._add_saved(fact, nid, name, packed, held=True)
            else:
                fact["saved"][name] = None
                fact["saved_errors"][name] = packed_message(packed)
            return
        try:
            value = getattr(node, attribute)
        except RuntimeError as error:  # freed by backward, or modified in place since it was saved
            message = short_message(error)
            if message.startswith(FREED_PREFIX) and self._saved_nothing(nid, name):
                return
            fact["saved"][name] = None
            fact["saved_errors"][name] = message
            if message.startswith(FREED_PREFIX):
                self.run.freed.setdefault(nid, {})[name] = message
            else:
                self._note_stale(nid, node, attribute)
            return
        if value is not None:  # (None: a slot this node did not fill)
            self._add_saved(fact, nid, name, value)

    def _note_stale(self, nid: str, node: Any, attribute: str) -> None:
        """A slot torch refuses as "modified by an inplace operation" still holds its tensor, and its
        message names that tensor's version: the next write to its storage changes what the node
        shows (BatchNorm's running stats reset twice under a kept graph). The node stays filed under
        that storage (``Commit._index_storages``), found through the unpack-free ``_raw_saved_*``."""
        try:
            raw_name = "_raw" + attribute if attribute.startswith(SAVED_PREFIX) else "_raw_" + attribute
            raw = getattr(node, raw_name)
            items = raw if isinstance(raw, list | tuple) else (raw,)
            pointers = [tensor_pointer(item.data) for item in items if item is not None]
        except (AttributeError, RuntimeError):
            return
        known = self.run.storage_ids.known_pointer
        found = {sid for pointer in pointers if pointer and (sid := known(pointer)) is not None}
        if found:
            self.stale_saves.setdefault(nid, set()).update(found)

    def _saved_nothing(self, nid: str, name: str) -> bool:
        """A custom Function's ``ctx.saved_tensors`` that held nothing when last read: torch refuses it
        after backward all the same, but nothing was freed (and a step that did not re-read the node
        must show the same)."""
        before = self.run.nodes.get(nid)
        return name == "saved_tensors" and before is not None and not any(
            key == name or key.startswith(name + "[") for key in before["saved"])

    def _add_saved(self, fact: dict[str, Any], nid: str, name: str, value: Any, held: bool = False) -> None:
        """``held``: the node holds these very objects (what a pack hook returned, a ctx attribute),
        not copies torch makes afresh at each access: each is a tensor of its own, never a twin."""
        kind = kind_of(value)  # (ctx attributes are the snippet's objects: read by their types)
        if kind == "tensor":
            self._saved(fact, nid, name, value, held)
        elif kind == "sequence":  # e.g. IndexBackward0's indices, ctx.saved_tensors
            for index, item in enumerate(itertools.islice(iterate_sequence(value), MAX_CONTAINER_ITEMS)):
                if kind_of(item) == "tensor":
                    self._saved(fact, nid, f"{name}[{index}]", item, held)

    def _saved(self, fact: dict[str, Any], nid: str, name: str, value: torch.Tensor,
               held: bool = False) -> None:
        if held or self.run.tensor_ids.known(value) is not None:
            self.saved_kinds.setdefault(nid, {})[name] = "direct"
            fact["saved"][name] = self.tensor_id(value)
            return
        fact["saved"][name] = None
        storage = self.run.storage_ids.known_pointer(tensor_pointer(value))
        grad_fn = value.grad_fn
        node = self.node_id(grad_fn) if grad_fn is not None else None
        self.deferred.append(Deferred(fact, name, nid, value, storage, signature(value, node)))
