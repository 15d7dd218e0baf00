"""numpy arrays in the memory view: one more view of the storage they share, or a buffer of their own.

An array on a tensor's storage (``t.numpy()``, ``np.asarray(t)``, ``torch.from_numpy(a)``) is a line
under that storage's strip, marked "numpy": its names, shape, strides in bytes, dtype and the byte
where it starts — its cells are the strip's own, so a write through it shows there. An array that
copied (``np.array(t)``, ``t.numpy().copy()``) is drawn in a group of its own: its buffer, its size,
its values. The memory builder (``app.render.memory``) feeds both from ``Changes.old_arrays``, so the
cost follows what the arrays did, not steps × arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from app.i18n import gettext as _
from app.render import fmt
from app.render.names import id_order
from app.render.tracks import Tracks
from app.schema import ArrayFact

MAX_BUFFERS = 24  # own-buffer arrays drawn at once; further ones are counted
MAX_SHOWN_VALUES = 12


def _names(fact: ArrayFact) -> str:
    return ", ".join(fact.names) or "?"


def view_text(fact: ArrayFact) -> str:
    """An array on a storage, read as one more view of it."""
    return _("numpy {names}: {shape} · strides {strides} bytes · {dtype} · from byte {offset}").format(
        names=_names(fact), shape=fmt.shape(fact.shape), strides=fmt.shape(fact.strides), dtype=fact.dtype,
        offset=fact.offset)


def _values_text(fact: ArrayFact) -> str:
    values = fact.values
    if values is None:
        return ""
    flat = fmt.leaves(values)
    text = ", ".join(fmt.scalar(v) for v in flat[:MAX_SHOWN_VALUES])
    return "[" + text + (", …" if len(flat) > MAX_SHOWN_VALUES else "") + "]"


def buffer_text(fact: ArrayFact) -> str:
    """An array on memory no tensor in the trace holds."""
    owner = {"numpy": _("numpy's own buffer"), "torch": _("memory of a tensor no longer reached"),
             "other": _("a Python object's buffer")}[fact.owner]
    size = fmt.nbytes(fact.buffer_nbytes) if fact.buffer_nbytes is not None else _("size unknown")
    text = _("numpy {names}: {owner}, {size} · {shape} · strides {strides} bytes · {dtype}").format(
        names=_names(fact), owner=owner, size=size, shape=fmt.shape(fact.shape),
        strides=fmt.shape(fact.strides), dtype=fact.dtype)
    values = _values_text(fact)
    return f"{text} · {values}" if values else text


@dataclass
class ArrayIndex:
    """Which arrays view each storage, kept from the arrays that changed."""

    on_storage: dict[str, set[str]] = field(default_factory=dict)

    def move(self, aid: str, old: ArrayFact | None, new: ArrayFact | None) -> None:
        if old is not None and old.storage is not None:
            found = self.on_storage.get(old.storage)
            if found is not None:
                found.discard(aid)
                if not found:
                    del self.on_storage[old.storage]
        if new is not None and new.storage is not None:
            self.on_storage.setdefault(new.storage, set()).add(aid)

    def text(self, sid: str, arrays: dict[str, ArrayFact]) -> str:
        found = self.on_storage.get(sid)
        if not found:  # most storages: asked for every storage a step touches
            return ""
        aids = sorted(found, key=id_order)
        return " | ".join(view_text(arrays[aid]) for aid in aids if aid in arrays)


@dataclass(frozen=True)
class Buffers:
    """The view of own-buffer arrays: a group (shown while one exists) with a slot per array."""

    k: int
    more_k: int
    slots: tuple[int, ...]


class BufferBuilder:
    """Slots for arrays on buffers of their own; a slot shows one array, then another."""

    def __init__(self, tracks: Tracks) -> None:
        self.tracks = tracks
        self.k = tracks.key(("numpy-buffers",))
        self.more_k = tracks.key(("numpy-buffers", "more"))
        self.slots: list[int] = []
        self.slot_of: dict[str, int] = {}
        self.free: list[int] = []
        self.waiting: dict[str, None] = {}  # own-buffer arrays past MAX_BUFFERS, in order

    def change(self, aid: str, new: ArrayFact | None, index: int) -> None:
        own = new is not None and new.storage is None
        slot = self.slot_of.get(aid)
        if not own:
            self.waiting.pop(aid, None)
            if slot is not None:
                del self.slot_of[aid]
                self.tracks.change_vis(self.slots[slot], index, False)
                self.tracks.change_text(self.slots[slot], index, None)
                self.free.append(slot)
            return
        assert new is not None
        if slot is None:
            if not self.free and len(self.slots) >= MAX_BUFFERS:
                self.waiting[aid] = None
                return
            if self.free:
                slot = self.free.pop(0)
            else:
                slot = len(self.slots)
                self.slots.append(self.tracks.key(("numpy-buffer", slot)))
            self.slot_of[aid] = slot
            self.tracks.change_vis(self.slots[slot], index, True)
        self.tracks.change_text(self.slots[slot], index, buffer_text(new))

    def end_step(self, index: int) -> None:
        if not self.slots and not self.waiting:
            return  # never an own-buffer array: no track at all (the page draws no group)
        self.tracks.change_vis(self.k, index, bool(self.slot_of or self.waiting))
        more = _("+{count} more arrays on buffers of their own").format(count=len(self.waiting)) \
            if self.waiting else None
        self.tracks.change_text(self.more_k, index, more)

    def finish(self) -> Buffers:
        return Buffers(self.k, self.more_k, tuple(self.slots))
