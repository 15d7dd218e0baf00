"""What one fact of a trace must say about itself, whatever the rest of the trace says: a tensor's
numbers, strides and values, a storage's bytes and values, a numpy array's layout within the memory it
says it shares, and a tensor's extent within its storage. ``app.trace.consistency`` calls these as it
replays the trace (its docstring lists every rule); each raises ``Found`` with the reason."""

from __future__ import annotations

import math
from itertools import chain
from typing import Any

from app.dtypes import dtype_itemsize
from app.schema import ArrayFact, StorageFact, TensorFact
from app.trace.replay import State

MAX_VALUES = 64  # the engine sends values for tensors of at most this many elements
LIMIT = 1 << 63  # torch's sizes, strides, offsets and byte counts are int64


class Found(Exception):  # noqa: N818 - control flow of the consistency check, never leaves app.trace
    def __init__(self, reason: str) -> None:
        self.reason = reason


def itemsize(dtype: str, storage: StorageFact) -> int:
    """Bytes per element of ``dtype`` (a tensor may view its storage as another dtype); the storage's
    when the name says none."""
    size = dtype_itemsize(dtype)
    return size if size is not None else max(storage.element_size, 1)


def extent(fact: TensorFact) -> int:
    """One past the last storage element the tensor can reach (0: it reaches none)."""
    if 0 in fact.shape:
        return 0
    end = fact.storage_offset + 1
    for n, s in zip(fact.shape, fact.stride, strict=True):  # a loop, not sum(): a call for every tensor set
        end += (n - 1) * s
    return end


# What validated values hold below their lists (``schema.Scalar``): a row whose items are all of
# these types has no list in it, found without a Python-level step per item.
_SCALARS = frozenset({float, int, bool, str, type(None)})


_LIST = frozenset({list})


def _flat(values: list) -> bool:
    """No item of ``values`` is a list (the set test proves it for plain scalars; anything else is
    asked item by item, as it always was)."""
    return _SCALARS.issuperset(map(type, values)) or not any(isinstance(item, list) for item in values)


def nested(values: Any, shape: list[int], depth: int = 0) -> bool:
    """``values`` is nested lists exactly as ``shape`` says, with scalars at the bottom."""
    if depth == len(shape):
        return not isinstance(values, list)
    if not isinstance(values, list) or len(values) != shape[depth]:
        return False
    if depth + 1 == len(shape):  # the innermost lists: scalars, checked without a call for each
        return _flat(values)
    if depth + 2 == len(shape):  # rows of scalars (a matrix, the common case): no call per row
        width = shape[depth + 1]
        if _LIST.issuperset(map(type, values)):  # plain lists (as validated values are): whole at once
            return {width}.issuperset(map(len, values)) and _flat(list(chain.from_iterable(values)))
        for row in values:  # noqa: SIM110 - a loop: all() would add a generator step per row
            if not isinstance(row, list) or len(row) != width or not _flat(row):
                return False
        return True
    return all(nested(item, shape, depth + 1) for item in values)


def _int64(value: int) -> bool:
    return 0 <= value < LIMIT


def check_tensor(tid: str, fact: TensorFact) -> None:
    """What one tensor fact must say about itself (its storage is checked by the caller)."""
    numbers = (*fact.shape, *fact.stride, fact.storage_offset)  # never empty: the offset is one
    if min(numbers) < 0 or max(numbers) >= LIMIT:  # every one an int64 (as ``_int64``, in two calls)
        raise Found(f"tensor {tid} has a negative or out-of-range size, stride or offset")
    if fact.version is not None and not _int64(fact.version):
        raise Found(f"tensor {tid} has version {fact.version}")
    if (fact.stride or fact.storage is not None) and len(fact.stride) != len(fact.shape):
        raise Found(f"tensor {tid} has {len(fact.stride)} strides for {len(fact.shape)} dimensions")
    unknown_shape = "shape" in fact.unavailable
    if fact.values is not None:
        if unknown_shape or "values" in fact.unavailable:
            raise Found(f"tensor {tid} has values the trace says were unavailable")
        if math.prod(fact.shape) > MAX_VALUES:
            raise Found(f"tensor {tid} carries values for more than {MAX_VALUES} elements")
        if not nested(fact.values, fact.shape):
            raise Found(f"tensor {tid}'s values are not nested as its shape {fact.shape}")
    if fact.summary is not None and not unknown_shape and fact.summary.numel != math.prod(fact.shape):
        raise Found(f"tensor {tid}'s summary counts {fact.summary.numel} elements, its shape "
                    f"{math.prod(fact.shape)}")


def check_storage(sid: str, fact: StorageFact) -> None:
    if not _int64(fact.nbytes) or not 1 <= fact.element_size <= 64:
        raise Found(f"storage {sid} has {fact.nbytes} bytes of {fact.element_size}-byte elements")
    if fact.values is not None and len(fact.values) != fact.nbytes // fact.element_size:
        raise Found(f"storage {sid} has {len(fact.values)} values for "
                    f"{fact.nbytes // fact.element_size} elements")


def check_array(aid: str, fact: ArrayFact, state: State) -> None:
    """A numpy array fact, when it is set: its own layout, and the bytes it reaches inside the
    storage it says it shares (the engine matched it by that memory range), or inside its buffer."""
    if len(fact.strides) != len(fact.shape) or not all(map(_int64, (*fact.shape, fact.offset))):
        raise Found(f"array {aid} has {len(fact.strides)} strides for {len(fact.shape)} dimensions, or a "
                    "negative size or offset")
    if not 1 <= fact.itemsize <= 64 or not all(abs(stride) < LIMIT for stride in fact.strides):
        raise Found(f"array {aid} has {fact.itemsize}-byte items or an out-of-range stride")
    too_many = math.prod(fact.shape) > MAX_VALUES
    if fact.values is not None and (too_many or not nested(fact.values, fact.shape)):
        raise Found(f"array {aid}'s values are not nested as its shape {fact.shape}")
    if fact.storage is not None:
        storage = state.storages.get(fact.storage)
        if storage is None:
            raise Found(f"array {aid} refers to storage {fact.storage}, which does not exist here")
        size = storage.nbytes
    else:
        size = fact.buffer_nbytes
    if size is None or any(n == 0 for n in fact.shape):
        return
    low = fact.offset + sum(min(0, (n - 1) * st) for n, st in zip(fact.shape, fact.strides, strict=True))
    high = fact.offset + sum(max(0, (n - 1) * st) for n, st in zip(fact.shape, fact.strides, strict=True))
    if low < 0 or high + fact.itemsize > size:
        raise Found(f"array {aid} reaches bytes {low} to {high + fact.itemsize} of a {size}-byte buffer")


def check_extent(tid: str, fact: TensorFact, storage: StorageFact) -> None:
    unavailable = fact.unavailable
    if unavailable and ("values" in unavailable or "shape" in unavailable):
        return  # the engine saw it reach past its storage (resized smaller) and read no values
    end = extent(fact) * itemsize(fact.dtype, storage)
    if end > storage.nbytes:
        raise Found(f"tensor {tid} reaches byte {end} of storage {fact.storage}, which has "
                    f"{storage.nbytes}")
