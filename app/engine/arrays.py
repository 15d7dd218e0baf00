"""numpy arrays the snippet can reach, as array facts: shape, strides, dtype, and whose memory.

``t.numpy()``, ``np.asarray(t)`` and ``torch.from_numpy(a)`` share memory with a tensor's storage;
``np.array(t)`` and ``t.numpy().copy()`` copy it. Which one happened is read from memory addresses,
as numpy and torch themselves would answer it (``np.shares_memory``): an array whose bytes lie inside
a storage the trace holds is one more view of that storage (``storage``, ``offset`` in bytes from
its start); any other array is on a buffer of its own — numpy's (``owner: "numpy"``, the size of the
array that owns the bytes), a tensor's the trace does not reach (``"torch"``), or another Python
object's (``"other"``).

The name walker (``app.engine.names``) finds arrays by type, as it finds tensors. Memory handed to
numpy can be written at any time without torch knowing (``a[0] = 5``), so every named array is read
again at every step, like the storages torch handed out (``app.engine.watch``): the storage an array
shares is made *volatile* here, so the tensors on it are re-read too. Only changed facts are emitted.
A snippet without arrays costs one emptiness check per step.

Observing runs no snippet code: an ndarray subclass's attributes are read through ``np.ndarray``'s
own descriptors. Values are read (≤ 64 elements) only while the bytes are known to be alive: an
array on a tensor's memory whose storage was since resized (freed) is not read.
"""

from __future__ import annotations

import math
import weakref
from bisect import bisect_left, bisect_right, insort
from typing import Any

import numpy as np
import torch

from app.engine.ids import tensor_pointer
from app.engine.values import MAX_VALUES, ValueWriter, nest

MAX_ARRAY_NAMES = 8  # names kept per array fact (walk order)
MAX_BASE_HOPS = 64

_ND = np.ndarray.__dict__
_shape = _ND["shape"].__get__
_strides = _ND["strides"].__get__
_dtype = _ND["dtype"].__get__
_base = _ND["base"].__get__
_size = _ND["size"].__get__
_nbytes = _ND["nbytes"].__get__
_flags = _ND["flags"].__get__
_interface = _ND["__array_interface__"].__get__
_tobytes = np.ndarray.tobytes

# numpy dtype kind -> a torch dtype ValueWriter converts the same way (floats: NaN as "NaN" …)
_READABLE = {"b": torch.bool, "i": torch.int64, "u": torch.int64}
NOT_READ = "not read: the memory it views was freed or moved"


def _pointer(array: np.ndarray) -> int:
    return _interface(array)["data"][0]


def _extent(array: np.ndarray, pointer: int) -> tuple[int, int]:
    """[low, high) bytes the array's elements occupy (strides may be negative)."""
    low = high = pointer
    for n, stride in zip(_shape(array), _strides(array), strict=True):
        step = (n - 1) * stride
        if step < 0:
            low += step
        else:
            high += step
    return low, high + _dtype(array).itemsize


def _torch_dtype(dtype: np.dtype) -> torch.dtype | None:
    if dtype.kind == "f" and dtype.itemsize <= 8:
        return torch.float32 if dtype.itemsize == 4 else torch.float64
    if dtype.kind == "c" and dtype.itemsize <= 16:
        return torch.complex128
    return _READABLE.get(dtype.kind)


class ArrayReader:
    """The array facts of a run, step after step (one per ``SnapshotTaker``).

    Kept incremental: an array's fact is read again only when its names changed, a storage over its
    bytes appeared, changed or went, or its *signature* changed — shape, strides and, for arrays
    small enough to show values, their raw bytes (one C call): what a write through numpy changes.
    The signature check is the one cost per array per step."""

    def __init__(self, values: ValueWriter) -> None:
        self.values = values
        self.facts: dict[str, dict[str, Any]] = {}
        self._names: dict[str, list[str]] = {}  # array id -> its names, walk order
        self._refs: dict[str, weakref.ref[Any]] = {}
        self._signature: dict[str, tuple] = {}
        self._small: set[str] = set()  # arrays whose bytes the signature holds (values shown)
        self._lows: list[tuple[int, str]] = []  # (low, array id), sorted: arrays by where they start
        self._span: dict[str, tuple[int, int]] = {}  # array id -> [low, high) bytes it occupies
        self._on: dict[str, set[str]] = {}  # storage id -> arrays matched to it
        self._ranges: dict[str, tuple[int, int]] = {}  # storage id -> (start, nbytes)
        self._index: list[tuple[int, int, str]] = []  # the same, sorted by start
        self._indexed = False

    def step(self, taker: Any, delta: dict[str, Any]) -> None:
        """Add to ``delta`` the arrays that appeared or changed and those gone."""
        walker = taker.walker
        if not walker.arrays and not self.facts:
            return
        stale = self._storages_changed(taker, delta)
        gone = []
        if walker.arrays_changed or not self._names and walker.arrays:
            names: dict[str, list[str]] = {}
            for name in sorted(walker.arrays, key=walker.position):
                names.setdefault(walker.arrays[name], []).append(name)
            for aid, found in names.items():
                if self._names.get(aid) != found:
                    stale.add(aid)
            self._names = names
            # an array that died lost its names first: only a step that changed names drops arrays
            gone = [aid for aid in self.facts if aid not in names]
            for aid in gone:
                self._forget(aid)
        changed: dict[str, dict[str, Any]] = {}
        refs, signatures, small = self._refs, self._signature, self._small
        for aid, found in self._names.items():
            ref = refs.get(aid)
            array = ref() if ref is not None else walker.array_ids.object(aid)
            if array is None:
                continue
            signature = (_shape(array), _strides(array), _tobytes(array) if aid in small else None)
            if aid not in stale and signatures.get(aid) == signature:
                continue
            refs[aid] = weakref.ref(array)
            fact = self._fact(taker, array, found, aid)
            if self.facts.get(aid) != fact:
                changed[aid] = self.facts[aid] = fact
            if _size(array) <= MAX_VALUES and "values" not in fact["unavailable"]:
                small.add(aid)  # its bytes are alive: a write through numpy shows in them
            else:
                small.discard(aid)
            signatures[aid] = (_shape(array), _strides(array), _tobytes(array) if aid in small else None)
        if changed:
            delta["arrays"] = changed
        if gone:
            delta.setdefault("dropped", {})["arrays"] = gone

    def _forget(self, aid: str) -> None:
        fact = self.facts.pop(aid)
        self._names.pop(aid, None)
        for table in (self._refs, self._signature):
            table.pop(aid, None)
        self._small.discard(aid)
        self._unspan(aid)
        self._unmatch(aid, fact["storage"])

    def _unmatch(self, aid: str, sid: str | None) -> None:
        on = self._on.get(sid) if sid is not None else None
        if on is not None:
            on.discard(aid)
            if not on:
                del self._on[sid]

    # ---- the storages, by memory range -----------------------------------------------------------
    def _storages_changed(self, taker: Any, delta: dict[str, Any]) -> set[str]:
        """Update the index from the step's storage changes; the arrays whose match may differ."""
        if not self._indexed:
            self._indexed = True
            for sid in taker.storages:
                self._place(taker, sid)
            return set(self._names)
        touched = [*delta.get("storages", ()), *delta.get("dropped", {}).get("storages", ())]
        stale: set[str] = set()
        for sid in touched:
            before = self._ranges.get(sid)
            now = self._place(taker, sid)
            if before == now:
                continue
            stale |= self._on.get(sid, set())
            if now is not None:  # the arrays over any of its bytes (bisect: not every array)
                start, end = now[0], now[0] + now[1]
                i = bisect_left(self._lows, (end, ""))
                stale.update(aid for _, aid in self._lows[:i] if self._span[aid][1] > start)
        return stale

    def _unspan(self, aid: str) -> None:
        span = self._span.pop(aid, None)
        if span is not None:
            self._lows.remove((span[0], aid))

    def _place(self, taker: Any, sid: str) -> tuple[int, int] | None:
        """File storage ``sid`` where its bytes are now (or nowhere, once it left the trace)."""
        old = self._ranges.pop(sid, None)
        if old is not None:
            self._index.remove((old[0], old[1], sid))
        fact = taker.storages.get(sid)
        if fact is None or not fact["nbytes"]:
            return None
        start = taker.storage_ids.pointer_of(sid) or self._tensor_start(taker, sid)
        if not start:
            return None
        self._ranges[sid] = (start, fact["nbytes"])
        insort(self._index, (start, fact["nbytes"], sid))
        return self._ranges[sid]

    @staticmethod
    def _tensor_start(taker: Any, sid: str) -> int:
        for tid in taker.on_storage.get(sid, ()):
            tensor = taker.tensor_ids.object(tid)
            if tensor is not None:
                return tensor_pointer(tensor)
        return 0

    def _fact(self, taker: Any, array: np.ndarray, names: list[str], aid: str) -> dict[str, Any]:
        dtype = _dtype(array)
        pointer = _pointer(array)
        fact: dict[str, Any] = {
            "names": names[:MAX_ARRAY_NAMES], "shape": list(_shape(array)), "strides": list(_strides(array)),
            "dtype": dtype.name[:32], "itemsize": dtype.itemsize, "storage": None, "offset": 0,
            "owner": "numpy", "buffer_nbytes": None, "base": None, "writeable": bool(_flags(array).writeable),
            "values": None, "unavailable": {},
        }
        base = _base(array)
        if isinstance(base, np.ndarray):  # isinstance on a type numpy made: no snippet code runs
            fact["base"] = taker.walker.array_ids.known(base)
        safe = True
        old = self.facts.get(aid)
        self._unmatch(aid, old["storage"] if old is not None else None)
        self._unspan(aid)
        if _size(array):
            low, high = self._span[aid] = _extent(array, pointer)
            insort(self._lows, (low, aid))
            found = self._storage_of(low, high)
            safe = self._own_buffer(array, fact, pointer, low, high)
            # Written through the array, any storage over some of its bytes changes: re-read at every
            # step (``torch.from_numpy(a[1:])`` lies inside ``a``, not ``a`` inside it).
            taker.volatile.update(self._overlapping(low, high))
            if found is not None:  # on a storage the trace holds: its bytes are alive
                start, nbytes, sid = found
                fact.update(storage=sid, offset=pointer - start, buffer_nbytes=nbytes)
                self._on.setdefault(sid, set()).add(aid)
                taker.volatile.add(sid)  # written through the array: re-read its tensors at every step
                safe = True
        if safe:
            self._values(array, dtype, fact)
        elif _size(array) <= MAX_VALUES:
            fact["unavailable"]["values"] = NOT_READ
        return fact

    def _overlapping(self, low: int, high: int) -> list[str]:
        """The storages with bytes in [low, high)."""
        index = self._index
        i = bisect_left(index, (high, -1, ""))
        return [sid for start, nbytes, sid in index[:i] if start + nbytes > low]

    def _storage_of(self, low: int, high: int) -> tuple[int, int, str] | None:
        index = self._index
        i = bisect_right(index, (low, math.inf, "")) - 1
        if i >= 0:
            start, nbytes, sid = index[i]
            if start <= low and high <= start + nbytes:
                return index[i]
        return None

    @staticmethod
    def _own_buffer(array: np.ndarray, fact: dict[str, Any], pointer: int, low: int, high: int) -> bool:
        """Who allocated the array's bytes (numpy, torch, another object) and where its buffer starts;
        False if its bytes may be gone (a tensor's storage since resized)."""
        root = array
        for _ in range(MAX_BASE_HOPS):
            base = _base(root)
            if not isinstance(base, np.ndarray):
                break
            root = base
        owner = _base(root)
        if owner is None:  # numpy allocated these bytes: the root array owns them
            fact.update(owner="numpy", offset=pointer - _pointer(root), buffer_nbytes=_nbytes(root))
            return True
        if isinstance(owner, torch.Tensor):  # a tensor's memory, the tensor no longer reachable
            start = tensor_pointer(owner)
            fact.update(owner="torch", offset=pointer - start if start else 0)
            if not start or owner.layout != torch.strided:
                return False
            t_low, t_high = _extent_of_tensor(owner)
            return t_low <= low and high <= t_high
        fact.update(owner="other", offset=pointer - _pointer(root))
        return True

    def _values(self, array: np.ndarray, dtype: np.dtype, fact: dict[str, Any]) -> None:
        size = _size(array)
        if size > MAX_VALUES:
            return
        target = _torch_dtype(dtype)
        if target is None:
            fact["unavailable"]["values"] = f"dtype {dtype.name[:32]} is not shown"
            return
        plain = np.array(array, subok=False, copy=True)  # a plain ndarray: no subclass method runs
        if not size:
            fact["values"] = plain.tolist()
            return
        flat = self.values.flat(plain.reshape(-1).tolist(), target)
        fact["values"] = nest(flat, fact["shape"])


def _extent_of_tensor(tensor: torch.Tensor) -> tuple[int, int]:
    pointer = tensor.data_ptr()
    low = high = pointer
    size = tensor.element_size()
    for n, stride in zip(tensor.shape, tensor.stride(), strict=True):
        step = (n - 1) * stride * size
        if step < 0:
            low += step
        else:
            high += step
    return low, high + size if tensor.numel() else high
