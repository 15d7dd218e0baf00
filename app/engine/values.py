"""Tensor values as JSON-safe Python data.

Speed and size matter here: every snapshot converts every small tensor and storage that changed, so
a 100-epoch training loop converts tens of thousands of numbers. float32 values (the common case)
are written with the fewest digits that read back as the same float32 (``0.1``, not
``0.10000000149011612``): about half the JSON, and what a learner expects to see. orjson writes a
float32 array that way in C (Ryu): about 0.1 µs a value, against 1 µs for numpy's ``str`` of each
(the same digits: a test compares them on every subnormal and millions of random bit patterns).
"""

from __future__ import annotations

import ctypes
import math
import struct
from itertools import chain
from typing import Any

import orjson
import torch

MAX_VALUES = 64
MAX_SUMMARY_NUMEL = 4_000_000

_FLOAT32 = struct.Struct("<f")
_STRIDED = torch.strided


def json_scalar(value: Any) -> Any:
    """NaN and infinities become strings so they survive strict JSON; complex becomes its repr."""
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return value
    if isinstance(value, bool | int):
        return value
    return str(value)


def _same_float32(candidate: float, value: float) -> bool:
    try:
        return _FLOAT32.unpack(_FLOAT32.pack(candidate))[0] == value
    except OverflowError:  # rounded past float32's largest value
        return False


try:  # numpy's float32 repr is the shortest round-trip one (Dragon4), computed in C: 2-3x faster
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is a dependency; this keeps the engine usable without
    _np = None


def shortest_float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (``value`` must be one, and finite)."""
    if _np is not None:
        return float(str(_np.float32(value)))
    return _shortest_float32_python(value)


def _shortest_float32_python(value: float) -> float:
    # Most float32 values need 8 or 9 digits; start there so a typical value costs two tries.
    eight = float(f"{value:.8g}")
    if not _same_float32(eight, value):
        return float(f"{value:.9g}")  # 9 significant digits always round-trip a float32
    best = eight
    for digits in (7, 6, 5, 4, 3, 2, 1):
        candidate = float(f"{value:.{digits}g}")
        if not _same_float32(candidate, value):
            break
        best = candidate
    return best


def float32_values(values: list[float]) -> list[Any]:
    """Each float32 value (a Python float read from a float32 tensor) in its shortest form; NaN and
    infinities as json_scalar writes them."""
    if _np is not None:
        array = _np.array(values, dtype=_np.float32)  # exact: every value is a float32 already
        written = orjson.loads(orjson.dumps(array, option=orjson.OPT_SERIALIZE_NUMPY))
        if None not in written:  # orjson writes NaN and infinities as null
            return written
    return [shortest_float32(v) if math.isfinite(v) else json_scalar(v) for v in values]


_FLOAT32_ARRAYS: dict[int, type] = {}  # element count -> the ctypes array type of that many floats


def _float32_memory(tensor: torch.Tensor) -> list[Any] | None:
    """A plain float32 tensor's elements in row-major order, in their shortest form, read from its
    memory by numpy without a Python float per element (which ``tolist`` makes and numpy converts
    back: a third of a 16-element read, half of a 64-element one). Not through ``Tensor.numpy()``,
    which marks the storage not resizable for good: the bytes are viewed where they are, as
    ``tolist`` reads them. None where the memory is not the numbers as they read (not contiguous,
    conjugate or negative bits, not on the CPU, no plain memory: a torch.func wrapper) or where one
    is NaN or infinite (orjson writes null): the caller reads those through ``tolist``."""
    if _np is None or not tensor.is_cpu or not tensor.is_contiguous() or tensor.is_conj() or tensor.is_neg():
        return None
    return _float32_at(tensor, tensor.numel())


def _float32_at(tensor: torch.Tensor, count: int) -> list[Any] | None:
    """``_float32_memory`` of a float32 CPU tensor whose ``count`` elements the caller knows lie in
    its memory as they read (contiguous, no conjugate or negative bit)."""
    try:
        pointer = tensor.data_ptr()
    except RuntimeError:
        return None
    if not pointer or not count:
        return None
    kind = _FLOAT32_ARRAYS.get(count)
    if kind is None:
        kind = _FLOAT32_ARRAYS[count] = ctypes.c_float * count
    text = orjson.dumps(_np.frombuffer(kind.from_address(pointer), dtype=_np.float32),
                        option=orjson.OPT_SERIALIZE_NUMPY)
    # (a search of the text, not of the list: comparing each float with None cost as much as parsing)
    return None if b"null" in text else orjson.loads(text)


class ValueWriter:
    """Converts tensor contents to JSON-safe lists."""

    def flat(self, values: list[Any], dtype: torch.dtype) -> list[Any]:
        """Convert a flat list of Python scalars read from a tensor of ``dtype``."""
        if dtype == torch.float32:
            return float32_values(values)
        if dtype.is_floating_point:
            total = sum(values)
            # A finite sum means every value is finite: no conversion needed (the common case).
            return values if total - total == 0 else [json_scalar(v) for v in values]
        if dtype.is_complex:
            return [str(v) for v in values]
        return values  # ints and bools are JSON already

    def scalar(self, value: Any, dtype: torch.dtype) -> Any:
        if dtype == torch.float32 and isinstance(value, float) and math.isfinite(value):
            return shortest_float32(value)  # (the same digits as float32_values, without its array)
        return self.flat([value], dtype)[0]

    def tensor_values(self, tensor: torch.Tensor) -> Any:
        """Nested lists for small dense tensors, else None."""
        if tensor.numel() > MAX_VALUES or tensor.layout != torch.strided:
            return None
        dims = tensor.dim()
        if dims == 0 or tensor.numel() == 0:
            # (what torch raises is the step's to say: a vmap's batched tensor, a meta tensor's "Cannot
            # copy out of meta tensor; no data!" — the model-ensembling tutorial's base model)
            raw = tensor.tolist()  # a scalar, or nested empty lists: nothing to convert
            return self.scalar(raw, tensor.dtype) if dims == 0 else raw
        return nest(self.elements(tensor), list(tensor.shape))

    def elements(self, tensor: torch.Tensor) -> list[Any]:
        """A small dense tensor's elements, converted, in row-major order."""
        if tensor.dtype == torch.float32:
            written = _float32_memory(tensor)
            if written is not None:
                return written
        # (what torch raises, a vmap's batched tensor, a meta tensor's, is the step's to say)
        return self.flat(_flatten(tensor.tolist(), tensor.dim()), tensor.dtype)

    def storage_values(self, tensor: torch.Tensor, nbytes: int, size: int, dtype: torch.dtype,
                       lazy: bool) -> list[Any] | None:
        """Every element of the tensor's storage, read with the tensor's dtype, in storage order.
        The caller read the tensor's element ``size``, ``dtype`` and whether it has conjugate or
        negative bits (``lazy``) already."""
        count = nbytes // size if size else 0
        if count > MAX_VALUES or tensor.layout is not _STRIDED or tensor.is_meta:
            return None
        try:
            if not lazy and tensor.numel() == count and tensor.storage_offset() == 0 \
                    and tensor.is_contiguous():
                # The tensor is its whole storage, in order (a fresh result, the common case): read
                # it as it is, sparing the detach and as_strided views (half of a small read).
                if dtype == torch.float32 and tensor.is_cpu and _np is not None:
                    written = _float32_at(tensor, count)
                    if written is not None:
                        return written
                return self.elements(tensor)
            raw = torch.as_strided(tensor.detach(), (count,), (1,), 0)
            # Conjugate and negative views read through a lazy flip; the memory itself holds the
            # unflipped numbers.
            if raw.is_conj():
                raw = raw.conj()
            if raw.is_neg():
                raw = raw._neg_view()
            return self.elements(raw)
        except (RuntimeError, TypeError, ValueError):
            return None

    def summary(self, tensor: torch.Tensor) -> dict[str, Any] | None:
        """min, max and mean of a tensor too large to send whole."""
        numel = tensor.numel()
        if numel <= MAX_VALUES:
            return None
        summary: dict[str, Any] = {"numel": numel}
        if numel > MAX_SUMMARY_NUMEL or tensor.layout != torch.strided or tensor.is_meta:
            return summary
        # (detached: no graph is recorded, so no no_grad() block, which cost as much as an op)
        data = tensor.detach()
        dtype = data.dtype
        try:
            if dtype.is_floating_point:
                # min and max in one pass, and the three numbers converted at once: half the cost of
                # three reductions converted one by one (the same numbers: aminmax is min and max).
                low, high = torch.aminmax(data)
                summary["min"], summary["max"], summary["mean"] = \
                    self.flat([low.item(), high.item(), data.mean().item()], dtype)
            elif dtype != torch.bool and not dtype.is_complex:
                low, high = torch.aminmax(data)
                summary["min"], summary["max"] = low.item(), high.item()
        except (RuntimeError, TypeError, ValueError):
            pass  # a dtype without these reductions (float8): its size only
        return summary


def _flatten(nested: Any, dims: int) -> list[Any]:
    """``tolist()`` of a tensor with ``dims`` dimensions, flat (a 0-d tensor's scalar: one element)."""
    if dims == 0:
        return [nested]
    for _ in range(dims - 1):
        nested = list(chain.from_iterable(nested))
    return nested


def nest(flat: list[Any], shape: list[int]) -> Any:
    """Rebuild nested lists of ``shape`` (no zero sizes) from a flat row-major list; 0-d: the scalar."""
    if not shape:
        return flat[0]
    for size in reversed(shape[1:]):
        flat = [flat[i : i + size] for i in range(0, len(flat), size)]
    return flat
