"""What the names under a value depend on, one level down, by object identity: a container's
fingerprint, taken at every step by the name walker (``app.engine.names``) and compared with the last
one, so that a container that did not change costs a comparison done in C, not a walk in Python."""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from torch import nn

from app.engine.members import (
    MAX_CONTAINER_ITEMS,
    SEQUENCES,
    SETS,
    attributes,
    cells,
    iterate,
    kind_of,
    object_dict,
    optimizer_state,
)
from app.engine.pointers import (
    POINTER,
    dict_entries,
    dict_version,
    dict_versions,
    list_pointers,
    tuples_held,
)

Identities = tuple[int, ...] | bytes  # ids, or a list's item addresses (app.engine.pointers)
# A dict's: its keys' ids and its values' ids, or its entries (app.engine.pointers.dict_entries)
DictIdentities = tuple[tuple[int, ...], tuple[int, ...]] | bytes
# From this many items a dict is fingerprinted by its entries: one copy of its table, ~3 µs whatever
# its size, where the ids cost ~0.09 µs an item — a loop that kept 800 graphs in a dict paid ~70 µs
# per step for them, every step, a cost that grew with the dict and not with what the step changed.
ENTRIES_FROM = 24


def grew(before: Identities, now: Identities) -> bool:
    """A sequence's fingerprint that only had items added at its end."""
    if type(before) is not type(now):
        return False
    return len(now) > len(before) and now[: len(before)] == before


def item_count(identities: Identities) -> int:
    """How many items a fingerprint of ``_ids`` or ``list_pointers`` stands for."""
    return len(identities) // POINTER if type(identities) is bytes else len(identities)


def dict_count(identities: DictIdentities) -> int:
    """How many items a dict's fingerprint stands for."""
    if type(identities) is bytes:
        return (len(identities) - 1) // identities[0]  # (its first byte: the size of one entry)
    return len(identities[0])


def dict_grew(before: DictIdentities, now: DictIdentities) -> bool:
    """A dict's fingerprint that only had items added at its end."""
    if type(before) is bytes:
        return grew(before, now)
    return type(now) is tuple and grew(before[0], now[0]) and grew(before[1], now[1])


def _ids(values: Iterable[Any]) -> tuple[int, ...]:
    return tuple(map(id, values))


def fingerprint(value: Any, kind: str) -> Any:
    """What the names under ``value`` depend on, one level down, by object identity (cheap: C loops;
    a sequence's or a set's, one copy of its item addresses: ``_identities``)."""
    if kind == "sequence" and list_pointers is not None and isinstance(value, list):
        return list_pointers(value, MAX_CONTAINER_ITEMS)
    if kind in ("sequence", "namedtuple"):
        return _identities(iterate(value, SEQUENCES))
    if kind == "set":
        return _identities(iterate(value, SETS))
    if kind == "dict":
        if dict_entries is not None and dict.__len__(value) >= ENTRIES_FROM:
            entries = dict_entries(value, MAX_CONTAINER_ITEMS)
            if entries is not None:
                return entries
        return (_ids(itertools.islice(dict.keys(value), MAX_CONTAINER_ITEMS)),
                _ids(itertools.islice(dict.values(value), MAX_CONTAINER_ITEMS)))
    if kind == "module":
        return _module_fingerprint(value)
    if kind == "optimizer":
        return tuple((index, id(entry)) for index, entry in optimizer_state(value))
    if kind == "function":
        return _ids(v for _, v in cells(value))
    found = attributes(value, kind)
    return tuple(a for a, _ in found), _ids(v for _, v in found)


HELD_KINDS = frozenset({"sequence", "namedtuple", "dict", "optimizer"})  # whose members held_ids follows
# A member's mark in ``names._Entry.fixed``: no container, a plain tuple, a plain dict read flat.
PLAIN, TUPLE, DICT = 0, 1, 2
_TUPLES = bytes.maketrans(bytes([TUPLE, DICT]), bytes([1, 0]))
_DICTS = bytes.maketrans(bytes([TUPLE, DICT]), bytes([0, 1]))
# The ids its tuples hold, and its dicts' version tags (8 bytes each, ``pointers.dict_versions``;
# where that view does not hold, one ``dict_version`` each)
Held = tuple[Identities, bytes | tuple[int | None, ...]]


def held_ids(value: Any, kind: str, fixed: bytes) -> Held:
    """What the members of ``value`` that ``fixed`` marks are now: the identities of what its plain
    tuples hold (``type(t) is tuple``: their own iteration, no snippet code) and the version tags
    of its plain dicts (``pointers.dict_versions``), in order, in C-speed passes."""
    if kind == "dict":
        source: Iterable[Any] = dict.values(value)
    elif kind == "optimizer":
        source = [entry for _, entry in optimizer_state(value)]
    elif type(value) is list:  # read as it is (a copy of 800 kept dicts' references: ~15 µs a step)
        return _held(value, fixed)
    else:
        source = iterate(value, SEQUENCES)
    return _held(list(itertools.islice(source, MAX_CONTAINER_ITEMS)), fixed)


def held_of(found: list[tuple[str, Any]], fixed: bytes) -> Held:
    """``held_ids`` of members just read (name, value), ``fixed`` being theirs."""
    return _held([v for _, v in found], fixed)


_NO_IDS: Identities = b"" if list_pointers is not None else ()


def _held(members: list[Any], fixed: bytes) -> Held:
    """``members``: a plain list (passed as it is: only C code iterates it), as long as ``fixed``."""
    tuples = _NO_IDS
    if TUPLE in fixed:
        marked = fixed.translate(_TUPLES)
        gathered = tuples_held(members, marked) if tuples_held is not None else None
        tuples = gathered if gathered is not None else \
            _identities(itertools.chain.from_iterable(itertools.compress(members, marked)))
    if dict_versions is not None:
        return tuples, dict_versions(members, fixed.translate(_DICTS)) if DICT in fixed else b""
    if DICT not in fixed or dict_version is None:
        return tuples, ()
    return tuples, tuple(map(dict_version, itertools.compress(members, fixed.translate(_DICTS))))


def _identities(values: Iterable[Any]) -> Identities:
    """The identities of ``values``: gathered in a list (references only), then its item addresses
    in one copy — ``id()`` costs ~35 ns an object (it is audited), which a list of 800 kept pairs
    paid at every step."""
    return identities(values if type(values) is list else list(values))


def identities(members: list[Any]) -> Identities:
    """The identities of a plain list's items (a set's members as ``members.set_members`` gathers
    them): their addresses in one copy."""
    if list_pointers is None:
        return _ids(members)
    return list_pointers(members, len(members))


_MODULE_DICTS = ("_parameters", "_buffers", "_modules")


def _module_fingerprint(module: nn.Module) -> tuple[Any, ...]:
    """Every module under ``module`` (as ``named_modules`` meets them), its attributes and its
    parameter, buffer and child dicts, by identity, in one flat tuple: each group is preceded by its
    keys, so the encoding is unambiguous. Flat, because it is taken for every module at every step
    (a 20-layer model's fingerprint was 190 µs as nested tuples, a third of a step)."""
    parts: list[Any] = []
    seen: set[int] = set()
    stack = [module]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        attributes = object_dict(current)
        parts.append(id(current))
        parts.append(tuple(attributes))
        parts.extend(map(id, attributes.values()))
        for attribute in _MODULE_DICTS:
            held = attributes.get(attribute)
            if type(held) is dict:
                parts.append(tuple(held))
                parts.extend(map(id, held.values()))
            else:
                parts.append(None)
        children = attributes.get("_modules")
        if type(children) is dict:
            stack.extend(reversed([child for child in children.values() if kind_of(child) == "module"]))
    return tuple(parts)
