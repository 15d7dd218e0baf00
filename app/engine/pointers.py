"""A list's items by identity in one copy: its array of object pointers, as bytes.

The name walker fingerprints every container at every step by the identity of what it holds
(``app.engine.names.fingerprint``). For a list that is one ``id()`` call per item, ~33 ns each: a
loop that keeps 3,000 losses paid ~50 µs per step for it, every step, a cost that grew with the list
and not with what the step changed. CPython keeps a list's items as a C array of pointers, and an
object's ``id()`` is its address, so the array's bytes say exactly what the ids say, for one
``memcpy``. The layout is CPython's ``PyListObject`` (``ob_item`` after the variable-size header);
it is checked once, against ``id()``, before it is used, and ``list_pointers`` is None where it
does not hold (another interpreter, a free-threaded build): callers then take the ids.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import sysconfig
from collections.abc import Callable

POINTER = ctypes.sizeof(ctypes.c_void_p)
_SIZE_AT = 2 * POINTER  # ob_refcnt, ob_type, then ob_size
_ITEMS_AT = 3 * POINTER  # then ob_item


def _pointers(value: list, limit: int) -> bytes:
    """The addresses of ``value``'s first ``limit`` items, as bytes (``POINTER`` each). The length
    is read by the built-in type, so a subclass's ``__len__`` does not run."""
    count = min(list.__len__(value), limit)
    if count <= 0:
        return b""
    items = ctypes.c_void_p.from_address(id(value) + _ITEMS_AT).value
    return ctypes.string_at(items, count * POINTER)


def _layout_holds() -> bool:
    """Whether a list here is laid out as ``_pointers`` reads it. Only the list's own header is read
    before its item array's address is known to be right (reading a wrong address could crash)."""
    if sys.implementation.name != "cpython" or sysconfig.get_config_var("Py_GIL_DISABLED"):
        return False
    probe = [object(), object(), object()]
    if sys.getsizeof(probe) < _ITEMS_AT + POINTER:
        return False
    if ctypes.c_ssize_t.from_address(id(probe) + _SIZE_AT).value != len(probe):
        return False
    items = ctypes.c_void_p.from_address(id(probe) + _ITEMS_AT).value
    if not items or ctypes.c_void_p.from_address(items).value != id(probe[0]):
        return False
    return _pointers(probe, 10) == struct.pack(f"{len(probe)}P", *map(id, probe))


list_pointers: Callable[[list, int], bytes] | None = _pointers if _layout_holds() else None
