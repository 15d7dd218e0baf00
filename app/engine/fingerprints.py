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
from app.engine.pointers import POINTER, list_pointers

Identities = tuple[int, ...] | bytes  # ids, or a list's item addresses (app.engine.pointers)


def grew(before: Identities, now: Identities) -> bool:
    """A sequence's fingerprint that only had items added at its end."""
    if type(before) is not type(now):
        return False
    return len(now) > len(before) and now[: len(before)] == before


def item_count(identities: Identities) -> int:
    """How many items a fingerprint of ``_ids`` or ``list_pointers`` stands for."""
    return len(identities) // POINTER if type(identities) is bytes else len(identities)


def _ids(values: Iterable[Any]) -> tuple[int, ...]:
    return tuple(map(id, values))


def fingerprint(value: Any, kind: str) -> Any:
    """What the names under ``value`` depend on, one level down, by object identity (cheap: C loops;
    a list's, one copy of its item addresses)."""
    if kind == "sequence" and list_pointers is not None and isinstance(value, list):
        return list_pointers(value, MAX_CONTAINER_ITEMS)
    if kind in ("sequence", "namedtuple"):
        return _ids(iterate(value, SEQUENCES))
    if kind == "set":
        return _ids(iterate(value, SETS))
    if kind == "dict":
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
