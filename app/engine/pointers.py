"""A list's items by identity in one copy: its array of object pointers, as bytes.

The name walker fingerprints every container at every step by the identity of what it holds
(``app.engine.names.fingerprint``). For a list that is one ``id()`` call per item, ~33 ns each: a
loop that keeps 3,000 losses paid ~50 µs per step for it, every step, a cost that grew with the list
and not with what the step changed. CPython keeps a list's items as a C array of pointers, and an
object's ``id()`` is its address, so the array's bytes say exactly what the ids say, for one
``memcpy``. The layout is CPython's ``PyListObject`` (``ob_item`` after the variable-size header);
it is checked once, against ``id()``, before it is used, and ``list_pointers`` is None where it
does not hold (another interpreter, a free-threaded build): callers then take the ids.

A dict likewise (``dict_entries``): its table's entries, in insertion order, are its items' hashes
and key and value addresses, one copy of them for what was a pair of ``id()`` calls per item.

Many dicts' version tags at once (``dict_versions``, a list that keeps ``{'loss': out}`` per step):
gathered by their addresses from a read-only numpy view of the address space, in one C loop.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import sysconfig
from collections.abc import Callable

import numpy as np

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


# A dict (CPython 3.11 and 3.12): ma_used, ma_version_tag, ma_keys, ma_values after the object header;
# its keys object: dk_refcnt, then log2 size, log2 of the index bytes and the kind (one byte each,
# padded to the next word with dk_version), dk_usable, dk_nentries, then the index, then the entries:
# (hash, key, value) for any keys, (key, value) where every key is a str. A deleted item leaves an
# entry of NULLs until the dict is resized.
_DICT_HEAD = struct.Struct("n8xnn")  # ma_used, ma_keys, ma_values
_KEYS_HEAD = struct.Struct("8xBBB13xn")  # dk_log2_size, dk_log2_index_bytes, dk_kind, dk_nentries
_ENTRY_SIZES = {0: 3 * POINTER, 1: 2 * POINTER}  # by dk_kind (2, a split table, is not read here)


def _entries(value: dict, limit: int) -> bytes | None:
    """The first ``limit`` items of ``value`` by identity, in order, as bytes: the size of one entry
    (one byte: a table that changes kind never reads as grown), then the entries' hashes and key
    and value addresses. None for a table whose entries are not its items one for one (an
    instance's split table, a deleted item's hole): callers then take the ids."""
    used, keys, values = _DICT_HEAD.unpack(ctypes.string_at(id(value) + _SIZE_AT, _DICT_HEAD.size))
    if values:
        return None
    _, index_bytes, kind, entries = _KEYS_HEAD.unpack(ctypes.string_at(keys, _KEYS_HEAD.size))
    size = _ENTRY_SIZES.get(kind)
    if size is None or entries != used:
        return None
    start = keys + _KEYS_HEAD.size + (1 << index_bytes)
    return bytes((size,)) + ctypes.string_at(start, min(used, limit) * size)


def _dict_layout_holds() -> bool:
    """Whether a dict here is laid out as ``_entries`` reads it: its header first (its length where
    ``ma_used`` is), then its keys object's (its entry count), only then the entries."""
    if list_pointers is None or sys.version_info[:2] not in ((3, 11), (3, 12)):
        return False
    general = {1: object(), (2, 3): object(), "x": None}
    text = {"a": object(), "bb": object()}
    for probe, size, pack in ((general, 3 * POINTER, "nPP"), (text, 2 * POINTER, "PP")):
        used, keys, values = _DICT_HEAD.unpack(ctypes.string_at(id(probe) + _SIZE_AT, _DICT_HEAD.size))
        if used != len(probe) or not keys or values:
            return False
        _, _, kind, entries = _KEYS_HEAD.unpack(ctypes.string_at(keys, _KEYS_HEAD.size))
        if _ENTRY_SIZES.get(kind) != size or entries != len(probe):
            return False
        fields = [field for key, item in probe.items()
                  for field in (hash(key), id(key), id(item))[-len(pack):]]
        if _entries(probe, 10) != bytes((size,)) + struct.pack(pack * len(probe), *fields):
            return False
    del general[1]  # a hole: not read as entries
    return _entries(general, 10) is None


dict_entries: Callable[[dict, int], bytes | None] | None = _entries if _dict_layout_holds() else None


_DICT_VERSION = struct.Struct("8xQ8xn")  # (ma_used), ma_version_tag, (ma_keys), ma_values


def _version(value: dict) -> int | None:
    """A dict's version tag (PEP 509): taken from one counter for the whole process at the dict's
    making and at every change of it, so the same tag is the same dict as it was, a dict made
    since at the same address included. None for an instance's split table (its values are
    written beside the dict)."""
    version, values = _DICT_VERSION.unpack(ctypes.string_at(id(value) + _SIZE_AT, _DICT_VERSION.size))
    return None if values else version


def _version_holds() -> bool:
    """Whether the tag is where ``_version`` reads it and moves as PEP 509 says."""
    if dict_entries is None:
        return False
    probe: dict = {}
    seen = [_version(probe)]
    probe["a"] = object()
    seen.append(_version(probe))
    probe["a"] = probe["a"]  # the same value again: no change
    if _version(probe) != seen[-1]:
        return False
    probe["a"] = object()
    seen.append(_version(probe))
    del probe["a"]
    seen.append(_version(probe))
    other: dict = {}
    seen.append(_version(other))
    return None not in seen and len(set(seen)) == len(seen)


dict_version: Callable[[dict], int | None] | None = _version if _version_holds() else None


# Many dicts' version tags at once (``dict_versions``): read through one read-only numpy view of the
# address space, gathered by the dicts' addresses in one C loop. Per dict, ``_version`` is a ctypes
# call (~1 µs): a list that kept 800 ``{'loss': out, 'step': i}`` paid ~0.8 ms at each step to check
# them, a cost that grew with the list and not with what the step changed; gathered, ~12 µs.
_WORD = 8
_ADDRESS_SPACE = 1 << 47  # user-space addresses on x86-64 (checked: every address read is below)
_TYPE_WORD, _VERSION_WORD, _VALUES_WORD = 1, 3, 5  # ob_type, ma_version_tag, ma_values (words from the start)


def _memory() -> np.ndarray:
    """The address space as read-only 64-bit words, word ``i`` at address ``_WORD * i``: made from
    address ``_WORD`` (ctypes refuses a NULL pointer), so index ``i - 1`` of this view."""
    start = ctypes.cast(ctypes.c_void_p(_WORD), ctypes.POINTER(ctypes.c_uint64))
    view = np.ctypeslib.as_array(start, shape=(_ADDRESS_SPACE // _WORD - 1,))
    view.flags.writeable = False
    return view


def _gathered_versions(memory: np.ndarray, dicts: list) -> bytes:
    """The version tags of ``dicts`` (the caller holds them: alive), 8 bytes each; 0 (no dict's
    tag) for an item that is no plain dict with a combined table. Only an item's type word is read
    before it is known to be a dict (every object has one): another item is read as ``_SAFE``."""
    if not dicts:
        return b""
    words = np.frombuffer(list_pointers(dicts, len(dicts)), dtype=np.uint64) // _WORD - 1
    if int(words.max()) + _VALUES_WORD >= memory.shape[0]:
        raise ValueError("an address beyond the view")
    plain = memory[words + _TYPE_WORD] == id(dict)
    if not plain.all():
        words = np.where(plain, words, id(_SAFE) // _WORD - 1)
    return np.where(plain & (memory[words + _VALUES_WORD] == 0), memory[words + _VERSION_WORD], 0).tobytes()


_SAFE: dict = {}


def _versions_hold() -> Callable[[list], bytes] | None:
    """``_gathered_versions`` over the address space, where it reads what ``_version`` reads."""
    if dict_version is None or _WORD != POINTER or sys.byteorder != "little":
        return None
    try:
        memory = _memory()
        probes: list = [{}, {"a": 1}, {1: object(), (2, 3): None}]
        probes[1]["b"] = 2

        class Split:
            pass

        instance = Split()
        instance.x = 1
        split = instance.__dict__
        if _gathered_versions(memory, probes) != struct.pack("3Q", *map(dict_version, probes)):
            return None
        if dict_version(split) is None and _gathered_versions(memory, [split, probes[0]]) != \
                struct.pack("2Q", 0, dict_version(probes[0])):
            return None
        if _gathered_versions(memory, [(1, 2), probes[2]]) != struct.pack("2Q", 0, dict_version(probes[2])):
            return None
    except (ValueError, TypeError, OverflowError, MemoryError):
        return None
    return lambda dicts: _gathered_versions(memory, dicts)


dict_versions: Callable[[list], bytes] | None = _versions_hold()
