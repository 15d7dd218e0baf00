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
# address space, gathered by the dicts' addresses in C loops. Per dict, ``_version`` is a ctypes call
# (~1 µs): a list that kept 800 ``{'loss': out, 'step': i}`` paid ~0.8 ms at each step to check them,
# a cost that grew with the list and not with what the step changed; gathered, ~10 µs.
_WORD = 8
_ADDRESS_SPACE = 1 << 47  # user-space addresses on x86-64 (beyond: IndexError, then one by one)
_DICT_TYPE = np.uint64(id(dict))
_SAFE: dict = {}  # read in place of an item that is no dict


def _memory() -> np.ndarray:
    """The address space as read-only 64-bit words: index ``i`` is the word at ``_WORD * (i + 1)``
    (made from address ``_WORD``: ctypes refuses a NULL pointer). An object's type is then at index
    ``address // _WORD``, a dict's version tag two words further."""
    start = ctypes.cast(ctypes.c_void_p(_WORD), ctypes.POINTER(ctypes.c_uint64))
    view = np.ctypeslib.as_array(start, shape=(_ADDRESS_SPACE // _WORD - 1,))
    view.flags.writeable = False
    return view


def _gathered_versions(memory: np.ndarray, items: list, selected: bytes) -> bytes:
    """The version tags of the items of ``items`` that ``selected`` marks (one byte per item, 1 or
    0), 8 bytes each; 0 (no dict's tag) for a marked item that is no plain dict. ``items`` is read
    as a list's item array (a subclass's methods do not run); the caller holds it, so its items are
    alive. Only an item's type word is read before it is known to be a dict (every object has one):
    another item is read as ``_SAFE``."""
    addresses = np.frombuffer(list_pointers(items, len(selected)), dtype=np.intp)
    count = min(len(addresses), len(selected))
    words = addresses[:count][np.frombuffer(selected, dtype=np.bool_, count=count)] >> 3
    if not words.size:
        return b""
    plain = memory.take(words) == _DICT_TYPE
    if plain.all():
        return memory.take(words + 2).tobytes()
    return np.where(plain, memory.take(np.where(plain, words, id(_SAFE) >> 3) + 2), 0).tobytes()


def _gathered_held(memory: np.ndarray, items: list, selected: bytes) -> bytes | None:
    """What the tuples of ``items`` that ``selected`` marks hold, by address, in order (as
    ``list_pointers`` of their items chained), where every one is a plain tuple of one length (a
    loop's ``(loss, acc)``): a tuple's items are inline after its size. None otherwise (callers
    then chain them)."""
    addresses = np.frombuffer(list_pointers(items, len(selected)), dtype=np.intp)
    count = min(len(addresses), len(selected))
    words = addresses[:count][np.frombuffer(selected, dtype=np.bool_, count=count)] >> 3
    if not words.size:
        return b""
    if not (memory.take(words) == _TUPLE_TYPE).all():
        return None
    sizes = memory.take(words + 1)
    size = int(sizes[0])
    if size > _MAX_GATHERED or not (sizes == sizes[0]).all():
        return None
    return memory.take((words + 2)[:, None] + np.arange(size)).tobytes()


_TUPLE_TYPE = np.uint64(id(tuple))
_MAX_GATHERED = 16  # items per tuple read this way


def _one_by_one(items: list, selected: bytes) -> bytes:
    """``_gathered_versions``'s answer, one ``dict_version`` at a time."""
    marked = [item for item, mark in zip(list.__iter__(items), selected, strict=False) if mark]
    tags = [(dict_version(item) or 0) if type(item) is dict else 0 for item in marked]  # type: ignore[misc]
    return struct.pack(f"{len(tags)}Q", *tags)


def _versions_hold() -> Callable[[list, bytes], bytes] | None:
    """``_gathered_versions`` over the address space, where it reads what ``_version`` reads."""
    if dict_version is None or _WORD != POINTER or sys.byteorder != "little":
        return None
    try:
        memory = _memory()
        probes: list = [{}, {"a": 1}, (1, 2), {1: object(), (2, 3): None}, "text"]
        probes[1]["b"] = 2
        tags = [dict_version(probes[i]) for i in (0, 1, 3)]
        if _gathered_versions(memory, probes, bytes([1, 1, 0, 1, 0])) != struct.pack("3Q", *tags):
            return None
        mixed = struct.pack("4Q", tags[1], 0, tags[2], 0)  # a tuple and a str marked: no tag
        if _gathered_versions(memory, probes, bytes([0, 1, 1, 1, 1])) != mixed:
            return None
        if _gathered_versions(memory, probes, bytes(5)) != b"":
            return None
    except (ValueError, TypeError, OverflowError, MemoryError, IndexError):
        return None

    def versions(items: list, selected: bytes) -> bytes:
        try:
            return _gathered_versions(memory, items, selected)
        except IndexError:  # an address beyond the view
            return _one_by_one(items, selected)

    return versions


dict_versions: Callable[[list, bytes], bytes] | None = _versions_hold()


def _held_holds() -> Callable[[list, bytes], bytes | None] | None:
    """``_gathered_held`` over the address space, where it reads what ``id()`` says."""
    if dict_versions is None:
        return None
    memory = _memory()
    one, two, three = object(), object(), object()
    probes: list = [(one, two), "x", (three, one), (two,), (one, two, three), ()]

    def ids(*objects: object) -> bytes:
        return struct.pack(f"{len(objects)}P", *map(id, objects))

    try:
        if _gathered_held(memory, probes, bytes([1, 0, 1, 0, 0, 0])) != ids(one, two, three, one) or \
                _gathered_held(memory, probes, bytes([0, 0, 0, 0, 1, 0])) != ids(one, two, three):
            return None
        if _gathered_held(memory, probes, bytes([1, 0, 0, 1, 0, 0])) is not None or \
                _gathered_held(memory, probes, bytes([0, 1, 0, 0, 0, 0])) is not None or \
                _gathered_held(memory, probes, bytes([0, 0, 0, 0, 0, 1])) != b"":
            return None
    except (ValueError, TypeError, IndexError):
        return None

    def held(items: list, selected: bytes) -> bytes | None:
        try:
            return _gathered_held(memory, items, selected)
        except IndexError:  # an address beyond the view
            return None

    return held


tuples_held: Callable[[list, bytes], bytes | None] | None = _held_holds()
