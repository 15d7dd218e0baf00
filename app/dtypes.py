"""Bytes per element of a dtype, from the name a trace gives it (``float32``, ``float8_e4m3fn``,
``quint4x2``): one definition for the server's consistency check (``app.trace.fact_checks``: does a
tensor's extent fit its storage) and the memory view (``app.render.memory_records``: which cells a
row covers), both reading a tensor that views its storage as another dtype. No torch here: the names
are torch's (``str(dtype)`` without ``torch.``), and ``tests/trace/test_dtype_sizes.py`` holds every
dtype torch has to torch's own ``itemsize``."""

from __future__ import annotations

import re
from functools import lru_cache

# The family and its bits (float8_e5m2 -> 8, complex64 -> 64), and a packing count after a digit or
# an underscore (bits2x4, quint4x2, float4_e2m1fn_x2: that many values in one element).
_BITS = re.compile(r"(?:q?u?int|b?float|complex|bits)(\d+)")
_PACKED = re.compile(r"(?<=[\d_])x(\d+)$")


@lru_cache(maxsize=256)  # a run names a handful of dtypes; a forged trace cannot grow this past the cap
def dtype_itemsize(dtype: str) -> int | None:
    """Bytes per element ``dtype``'s name says, as torch's ``itemsize``: whole bytes, a sub-byte dtype
    (``int4``, ``uint1``) taking one. None when the name says none (the caller uses the storage's)."""
    if dtype == "bool":
        return 1
    match = _BITS.match(dtype)
    if match is None:
        return None
    packed = _PACKED.search(dtype)
    bits = int(match.group(1)) * (int(packed.group(1)) if packed else 1)
    return -(-bits // 8) or None  # "int0" says nothing
