"""Saved tensors, read as the graph holds them: which attributes of a node unpack saved values, what a
``saved_tensors_hooks`` pack function kept instead, and the slots of a node's fact they fill.

torch hands some saved tensors out as fresh objects at every access (a saved output): those are
``Deferred`` until the step is read, then matched to a live twin by ``signature`` (``Reader.match``,
``plan.Planning._twin``) or given an id of their own. A slot torch refuses as modified in place
keeps its message, and the node is filed under the memory it saved from. Reading never unpacks a
value through an unpack hook that is not torch's plain accessor (the snippet's hooks may print or
count; non-reentrant checkpoint would recompute and then refuse backward's own unpack).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import BackwardCFunction

from app.engine.ids import tensor_pointer
from app.engine.members import iterate_sequence, kind_of
from app.engine.tensor_facts import dtype_name, short_message

SAVED_PREFIX = "_saved_"
MAX_CONTAINER_ITEMS = 256
# Accessing a saved tensor after backward released it raises this, and always will again.
FREED_PREFIX = "Trying to backward through the graph a second time"


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
    try:
        raw = getattr(node, raw_name(attribute), None)
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


def raw_name(attribute: str) -> str:
    """The attribute that gives a saved value without unpacking it: ``_raw_saved_self`` for
    ``_saved_self``, ``_raw_saved_tensors`` for a custom Function's ``saved_tensors``."""
    name = _RAW_NAMES.get(attribute)
    if name is None:
        name = _RAW_NAMES[attribute] = \
            "_raw" + attribute if attribute.startswith(SAVED_PREFIX) else "_raw_" + attribute
    return name


_RAW_NAMES: dict[str, str] = {}  # saved attribute -> the attribute of its unpacked-free form
_SAVE_ON_CPU_UNPACK = getattr(torch.autograd.graph.save_on_cpu().unpack_hook, "__code__", None)


def packed_message(packed: Any) -> str:
    """What a saved slot shows when a pack hook kept something other than tensors."""
    if type(packed).__module__ == "torch.utils.checkpoint":
        return "Not kept: torch.utils.checkpoint recomputes it during backward."
    return f"Packed as a {type(packed).__name__} by a saved_tensors_hooks pack function."


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


class SavedSlots:
    """The ``Reader``'s reading of a node's saved slots into its fact (a mixin: the state is the
    reader's — ``run``, ``saved_kinds``, ``deferred``, ``stale_saves`` — and its ids in meeting order)."""

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
            raw = getattr(node, raw_name(attribute))
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
