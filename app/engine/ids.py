"""Small, stable ids for live tensors, storages and graph nodes, without keeping them alive.

The explorer must not change what the snippet does, so it holds no strong reference to user objects
between steps and leaves no mark on them. Tensors and storages are weakly referenced (torch keeps
one Python object per live tensor and storage, so the object is the identity). Graph nodes cannot be
weakly referenced, and their Python wrapper comes and goes; a function node is identified by its
``_sequence_nr()`` (unique per node created in the thread) and an ``AccumulateGrad`` — whose sequence
number is the same for all of them — by its leaf.

Every registry keeps a journal, so an attempt at a step can be undone (``mark`` / ``rollback``):
the engine tries the incremental path first and falls back to a whole snapshot when it cannot be
sure the incremental one would number new objects as the whole one does.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any

import torch


class _Journal:
    """Undo records for a registry: each entry is a function and the arguments that revert one change
    (not a closure: a step notes dozens, and each closure is an allocation the collector tracks)."""

    def __init__(self) -> None:
        self._undo: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.recording = False

    def note(self, undo: Callable[..., Any], *args: Any) -> None:
        if self.recording:
            self._undo.append((undo, args))

    def mark(self) -> int:
        self.recording = True
        return len(self._undo)

    def rollback(self, mark: int) -> None:
        while len(self._undo) > mark:
            undo, args = self._undo.pop()
            undo(*args)

    def commit(self) -> None:
        self._undo.clear()
        self.recording = False


class _AddressRef(weakref.ref):
    """A weak reference that knows the address it was filed under, for its registry's one callback
    (a closure per reference would be one more allocation per object met)."""

    __slots__ = ("address",)
    address: int


class ObjectIds:
    """Maps live, weak-referenceable objects to ids like ``t1``; an id is never reused."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._count = 0
        self._by_address: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._by_id: dict[str, weakref.ref[Any]] = {}  # the latest object that answered to an id
        self._by_key: dict[Hashable, str] = {}
        self.journal = _Journal()
        # The bound method made once: weakref callbacks must not keep the registry alive through
        # a cycle, and a registry outlives its references anyway.
        self._forget_callback = self._forget
        # Addresses whose object died since the last ``take_deaths``: a cached reading that named an
        # object at one of them is stale.
        self._deaths: set[int] = set()

    @property
    def count(self) -> int:
        return self._count

    def _new(self) -> str:
        self._count += 1
        self.journal.note(self._uncount)
        return f"{self._prefix}{self._count}"

    def _uncount(self) -> None:
        self._count -= 1

    def of(self, obj: Any) -> str:
        address = id(obj)
        entry = self._by_address.get(address)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        new_id = self._new()
        # The callback forgets the address once the object dies, so a later object at the same
        # address gets a fresh id instead of inheriting this one.
        self._remember(obj, new_id)
        return new_id

    def _forget(self, ref: _AddressRef) -> None:
        address = ref.address
        entry = self._by_address.get(address)
        if entry is not None and entry[0] is ref:
            del self._by_address[address]
            self._deaths.add(address)
            if self._by_id.get(entry[1]) is ref:
                del self._by_id[entry[1]]

    def known(self, obj: Any) -> str | None:
        entry = self._by_address.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        return None

    def known_address(self, address: int) -> str | None:
        """The id of the live object at ``address``, if it has one."""
        entry = self._by_address.get(address)
        if entry is not None and entry[0]() is not None:
            return entry[1]
        return None

    def alias(self, obj: Any, existing_id: str) -> None:
        """Make a fresh object answer to an id handed out earlier (see ``keyed``)."""
        self._remember(obj, existing_id)

    def _remember(self, obj: Any, object_id: str) -> None:
        address = id(obj)
        previous = self._by_address.get(address)
        previous_ref = self._by_id.get(object_id)
        ref = _AddressRef(obj, self._forget_callback)
        ref.address = address
        self._by_address[address] = (ref, object_id)
        self._by_id[object_id] = ref
        self.journal.note(self._restore, address, previous, object_id, previous_ref)

    def _restore(self, address: int, previous: tuple[weakref.ref[Any], str] | None, object_id: str,
                 previous_ref: weakref.ref[Any] | None) -> None:
        if previous is None:
            self._by_address.pop(address, None)
        else:
            self._by_address[address] = previous
        if previous_ref is None:
            self._by_id.pop(object_id, None)
        else:
            self._by_id[object_id] = previous_ref

    def object(self, object_id: str) -> Any:
        """The live object that answers to ``object_id``, or None."""
        ref = self._by_id.get(object_id)
        obj = ref() if ref is not None else None
        if obj is None:
            return None
        entry = self._by_address.get(id(obj))
        return obj if entry is not None and entry[1] == object_id else None

    def keyed(self, key: Hashable) -> str:
        """An id for something torch re-creates on every access (a saved output tensor)."""
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = self._new()
            self.journal.note(self._by_key.pop, key, None)
        return found

    def has_key(self, key: Hashable) -> bool:
        return key in self._by_key

    def take_deaths(self) -> set[int]:
        deaths, self._deaths = self._deaths, set()
        return deaths


class StorageIds(ObjectIds):
    """Storages, identified by their object and, beyond it, by their memory: two storage objects
    over the same bytes (``torch.from_dlpack``, two ``frombuffer`` calls on one buffer) are one
    storage, as the user thinks of memory."""

    def __init__(self) -> None:
        super().__init__("s")
        self._by_pointer: dict[int, tuple[weakref.ref[Any], str]] = {}
        # Storages known only by where their bytes are (met during a backward pass, where making a
        # storage object would change torch's choices: see ``tensor_pointer``), with the tensors
        # they were met through. Forgotten once a step outside the pass has had the chance to meet
        # their storage object.
        self._by_bare_pointer: dict[int, _Bare] = {}
        self._pointer_of: dict[str, int] = {}  # storage id -> where its bytes were last seen
        self._unpoint_callback = self._unpoint
        self.pass_depth = 0  # backward passes running, one inside another (app.engine.run)

    def of_storage(self, storage: Any) -> str:
        entry = self._by_address.get(id(storage))
        sid = entry[1] if entry is not None and entry[0]() is storage else None
        pointer = _pointer(storage)
        if sid is None and pointer:
            entry = self._by_pointer.get(pointer)
            if entry is not None and entry[0]() is not None:
                self.alias(storage, entry[1])
                return entry[1]
            bare = self._by_bare_pointer.get(pointer)
            if bare is not None and bare.alive(pointer):
                self.alias(storage, bare.sid)
                sid = bare.sid
        if sid is None:  # a storage met for the first time (``of``, without asking again whether it is known)
            sid = self._new()
            self._remember(storage, sid)
        self.point(storage, sid, pointer)
        return sid

    def known_pointer(self, pointer: int) -> str | None:
        """The id of the live storage whose bytes start at ``pointer`` (or one known only so)."""
        if not pointer:
            return None
        entry = self._by_pointer.get(pointer)
        if entry is not None and entry[0]() is not None:
            return entry[1]
        bare = self._by_bare_pointer.get(pointer)
        return bare.sid if bare is not None and bare.alive(pointer) else None

    def of_pointer(self, pointer: int, tensor: Any, saved_by: str | None = None) -> str:
        """An id for the storage at ``pointer``, met through ``tensor``, without its storage object.
        ``saved_by``: ``tensor`` is a wrapper torch makes afresh at each access (a saved output) of
        that node, which dies at once while what the node saved keeps the storage alive."""
        found = self.known_pointer(pointer)
        if found is not None:
            bare = self._by_bare_pointer.get(pointer)
            if bare is not None and bare.sid == found:
                bare.met(tensor, saved_by, self.pass_depth)  # a true fact even if undone: no journal
            return found
        previous = self._by_bare_pointer.get(pointer)
        bare = self._by_bare_pointer[pointer] = _Bare(self._new())
        bare.met(tensor, saved_by, self.pass_depth)
        self.journal.note(self._unbare, pointer, bare, previous)
        return bare.sid

    def end_pass(self, depth: int) -> None:
        """The backward pass at ``depth`` (1: outermost) returned: what its saved outputs held is
        freed with it; a pass it ran inside (a backward() in a hook) still holds what it met."""
        for bare in self._by_bare_pointer.values():
            bare.release(depth)

    def release_saved(self, node_id: str) -> None:
        """Node ``node_id`` ran and torch frees what it saved: a storage held only through its saved
        outputs is held no more (the allocator may hand its address to the next tensor at once,
        later in the same pass: a hook's new scalar is a new storage, not the dead one)."""
        for bare in self._by_bare_pointer.values():
            bare.unhold(node_id)

    def _unbare(self, pointer: int, bare: _Bare, previous: _Bare | None) -> None:
        if self._by_bare_pointer.get(pointer) is bare:
            if previous is None:
                del self._by_bare_pointer[pointer]
            else:
                self._by_bare_pointer[pointer] = previous

    def pointer_of(self, sid: str) -> int:
        """Where the bytes of storage ``sid`` were last seen (0: not known by its object)."""
        return self._pointer_of.get(sid, 0)

    def bare_storages(self) -> list[tuple[str, Any]]:
        """(id, a tensor it was met through that is still on its bytes, else None) per storage known
        only by its bytes so far."""
        return [(entry.sid, entry.holder(pointer)) for pointer, entry in self._by_bare_pointer.items()]

    def take_bare_pointers(self) -> dict[int, str]:
        """The storages known only by their bytes, forgotten here (the caller meets their objects)."""
        bare, self._by_bare_pointer = self._by_bare_pointer, {}
        return {pointer: entry.sid for pointer, entry in bare.items()}

    def point(self, storage: Any, sid: str, pointer: int | None = None) -> None:
        """Remember where ``storage``'s bytes are now (they move when it is resized)."""
        pointer = _pointer(storage) if pointer is None else pointer
        if not pointer:
            return
        entry = self._by_pointer.get(pointer)
        if entry is not None and entry[0]() is not None and entry[1] == sid:
            return
        moved_from = self._pointer_of.get(sid)
        if moved_from is not None and moved_from != pointer:  # resized: its old bytes are not it any more
            old = self._by_pointer.get(moved_from)
            if old is not None and old[1] == sid:
                del self._by_pointer[moved_from]
                self.journal.note(self._repoint, moved_from, old)
        previous = entry
        previous_at = self._pointer_of.get(sid)
        ref = _AddressRef(storage, self._unpoint_callback)
        ref.address = pointer
        self._by_pointer[pointer] = (ref, sid)
        self._pointer_of[sid] = pointer
        self.journal.note(self._repoint, pointer, previous)
        if previous_at is not None:
            self.journal.note(self._pointer_of.__setitem__, sid, previous_at)
        else:
            self.journal.note(self._pointer_of.pop, sid, None)

    def _unpoint(self, ref: _AddressRef) -> None:
        pointer = ref.address
        entry = self._by_pointer.get(pointer)
        if entry is not None and entry[0] is ref:
            del self._by_pointer[pointer]
            if self._pointer_of.get(entry[1]) == pointer:
                del self._pointer_of[entry[1]]

    def _repoint(self, pointer: int, previous: tuple[weakref.ref[Any], str] | None) -> None:
        if previous is None:
            self._by_pointer.pop(pointer, None)
        else:
            self._by_pointer[pointer] = previous


class _Bare:
    """A storage known only by where its bytes start, and the tensors it was met through.

    Its bytes are its only name, and the allocator hands a freed block's address to the next
    allocation at once: a gradient freed in the middle of a pass and a new one made at the same
    address are two storages. A live tensor still on those bytes keeps the storage alive, so the
    name holds while one of the tensors it was met through does; once none does, the address names
    whatever is there now, a new storage. (A storage can outlive every tensor the trace met it
    through, through one it never met: then it is taken for a new one, the lesser mistake.) A
    storage met through a saved output, whose wrapper torch makes afresh at each access, is held by
    what torch saved, out of sight: it is taken to live until the pass it was met in ends (the
    outermost such, when a pass runs inside another's hook: ``StorageIds.end_pass``), or until
    every node that saved it frees what it saved (``StorageIds.release_saved``), whichever is first.

    A node can also die without either: a graph kept with ``create_graph`` (each vjp of
    ``torch.autograd.functional.hessian``) dies with its vjp, and what it saved with it. Where the
    wrapper met is one torch keeps (a saved input: its tensor is the node's own, not a fresh one), a
    weak reference to that tensor says when it died: then so did the hold, and the next tensor the
    allocator puts at its address (the next vjp's one-hot gradient) is a new storage — it took the
    dead one's id in the runs where the allocator happened to put it there, never in the others.
    Only a fresh wrapper (a saved output) leaves the hold to the pass and the nodes, as above.
    """

    __slots__ = ("sid", "_tensors", "_held", "_holders", "_kept", "_fresh")

    def __init__(self, sid: str) -> None:
        self.sid = sid
        self._tensors: list[weakref.ref[Any]] = []  # weak: a tensor's wrapper lives as long as it does
        self._held: int | None = None  # the outermost pass depth a saved output was met at
        self._holders: set[str] = set()  # the nodes whose saved outputs it was met through
        # Weak references to the tensors (not their wrappers) a node keeps that it was met through,
        # by their address (``_WeakTensorRef``: expired once the tensor died), and whether it was
        # met through a fresh wrapper too (then only the pass and the nodes end the hold).
        self._kept: dict[int, Any] = {}
        self._fresh = False

    def met(self, tensor: Any, saved_by: str | None, depth: int) -> None:
        if saved_by is not None:
            self._held = depth if self._held is None else min(self._held, depth)
            self._holders.add(saved_by)
            try:
                kept = tensor._use_count() > 1  # held by more than the wrapper in hand: the node's own
            except (AttributeError, RuntimeError, TypeError):  # a tensor without one: taken as fresh
                kept = False
            if kept:
                known = self._kept.get(tensor._cdata)
                if known is None or known.expired():  # (met again at every step of a whole reading)
                    self._kept[tensor._cdata] = _WeakTensorRef(tensor)
            else:
                self._fresh = True
        elif all(ref() is not tensor for ref in self._tensors):
            self._tensors.append(weakref.ref(tensor))

    def release(self, depth: int) -> None:
        if self._held is not None and self._held >= depth:
            self._unheld()

    def unhold(self, node_id: str) -> None:
        if node_id in self._holders:
            self._holders.discard(node_id)
            if not self._holders:
                self._unheld()

    def _unheld(self) -> None:
        self._held = None
        self._holders.clear()
        self._kept.clear()
        self._fresh = False

    def alive(self, pointer: int) -> bool:
        if self._held is not None:
            if self._fresh or any(not ref.expired() for ref in self._kept.values()):
                return True
            self._unheld()  # every tensor it was held through died: the hold with them
        return self.holder(pointer) is not None

    def holder(self, pointer: int) -> Any:
        """A tensor it was met through, still on its bytes (it keeps the storage alive), or None."""
        for ref in self._tensors:
            tensor = ref()
            if tensor is not None and tensor_pointer(tensor) == pointer:
                return tensor
        return None


def tensor_pointer(tensor: Any) -> int:
    """Where the bytes of ``tensor``'s storage start, read without making a storage object: torch
    keeps every storage object it made alive (and counted) while the storage lives, and a counted
    storage is one torch will not accumulate a gradient into in place — merely looking would
    change what torch does. 0 when the tensor has no (non-empty) storage."""
    try:
        pointer = tensor.data_ptr()
        return pointer - tensor.storage_offset() * tensor.element_size() if pointer else 0
    except Exception:  # noqa: BLE001 - an uninitialised parameter, a nested tensor: no pointer to read
        return 0


def _pointer(storage: Any) -> int:
    """The address of a storage's bytes; 0 for empty storages (they all report 0: never shared)."""
    try:
        return storage.data_ptr() if storage.nbytes() else 0
    except (RuntimeError, NotImplementedError, TypeError):
        return 0


_WeakTensorRef = torch._C._WeakTensorRef  # a weak reference to a tensor itself, not its Python wrapper

ACCUMULATE_SEQUENCE = 2**64 - 1  # torch gives every AccumulateGrad this sequence number

_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
_unwrapped = torch._C._functorch.get_unwrapped


def key_leaf(leaf: Any) -> Any:
    """The tensor whose id keys an ``AccumulateGrad``: its leaf — or, inside a torch.func transform,
    the tensor the leaf's wrapper stands for: ``variable`` read at another level of ``grad(grad(f))``
    is another wrapper of the same leaf, and the node must stay the node it was."""
    try:
        while _is_wrapped(leaf):
            leaf = _unwrapped(leaf)
    except (RuntimeError, TypeError):  # a dead wrapper: it stands for itself
        pass
    return leaf


def unique_sequence(node: Any) -> int | None:
    """A function node's ``_sequence_nr()``, unique among the thread's nodes; None for a node that has
    none of its own (every ``AccumulateGrad`` shares one)."""
    try:
        sequence = node._sequence_nr()
    except (AttributeError, RuntimeError):
        return None
    return None if sequence == ACCUMULATE_SEQUENCE else sequence


class NodeIds:
    """Ids for autograd graph nodes (``n1`` …), from the node's own identity (see the module docstring).

    An ``AccumulateGrad`` is keyed by its leaf's tensor id; when it leaves the trace (``retire``) its
    key is forgotten, because torch makes a new one for the leaf once the old graph is gone.
    """

    def __init__(self) -> None:
        self._count = 0
        self._by_key: dict[Hashable, str] = {}
        self.journal = _Journal()

    @property
    def count(self) -> int:
        return self._count

    def key(self, node: Any, leaf_id: str | None) -> Hashable:
        sequence = unique_sequence(node)
        if sequence is None:
            # Which AccumulateGrad of the leaf: its metadata dict lives exactly as long as it does
            # (reading ``metadata`` makes an empty one, as any reader's first access would).
            return ("leaf", leaf_id, id(node.metadata)) if leaf_id is not None else ("object", id(node))
        return (sequence, type(node).__name__)

    def of_key(self, key: Hashable) -> str:
        found = self._by_key.get(key)
        if found is None:
            self._count += 1
            found = self._by_key[key] = f"n{self._count}"
            self.journal.note(self._undo_new, key)
        return found

    def known_key(self, key: Hashable) -> str | None:
        return self._by_key.get(key)

    def also(self, key: Hashable, node_id: str, before: Hashable = None) -> None:
        """Let ``key`` find ``node_id`` too (an AccumulateGrad first met before its leaf had an id).
        ``before``: the key it was filed under then; one made of the object's address is forgotten
        (only the leaf's key is retired with the node, and another node made later at that address,
        met before its leaf had an id, would be taken for this one)."""
        if self._by_key.get(key) != node_id:
            previous = self._by_key.get(key)
            self._by_key[key] = node_id
            if previous is None:
                self.journal.note(self._by_key.pop, key, None)
            else:
                self.journal.note(self._by_key.__setitem__, key, previous)
        if isinstance(before, tuple) and before[0] == "object" and self._by_key.get(before) == node_id:
            del self._by_key[before]
            self.journal.note(self._by_key.__setitem__, before, node_id)

    def _undo_new(self, key: Hashable) -> None:
        self._by_key.pop(key, None)
        self._count -= 1

    def retire(self, key: Hashable) -> None:
        """Forget an ``AccumulateGrad``'s key: the next one for that leaf is a new node."""
        if key and isinstance(key, tuple) and key[0] in ("leaf", "object"):
            found = self._by_key.pop(key, None)
            if found is not None:
                self.journal.note(self._by_key.__setitem__, key, found)
