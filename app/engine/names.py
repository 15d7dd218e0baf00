"""The names a user can reach tensors by, read step after step with a cache, so that a container that
did not change costs a comparison of object ids (done in C), not a walk in Python.

A name is ``x``, ``losses[0]``, ``d['k']``, ``model.0.weight`` (parameters and buffers of modules,
read from their internal dicts, never through overridable methods), ``cfg.scale`` (attributes of
instances of the snippet's classes), ``f:x`` (a local of function ``f``). ``NameWalker.walk`` returns
what changed since the previous step — names bound or rebound, names gone — keeps every current name,
and can say where a name comes in walk order (the order the whole snapshot visits names in).

The cache holds no user object: an entry is found by the container's id and checked against the ids
of what it holds, and its nested containers are fetched from it again at every step.
"""

from __future__ import annotations

import itertools
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from app.engine.ids import ObjectIds

MAX_CONTAINER_ITEMS = 256
MAX_CONTAINER_DEPTH = 3
SWEEP_EVERY = 64  # steps between sweeps of cache entries no longer used

# Names the engine binds for the snippet; they are modules, not user data.
PRELUDE_NAMES = frozenset({"torch", "nn", "F", "math", "__builtins__", "__name__"})

Item = tuple[str, str]  # (name, tensor id)
Member = tuple[str, Any, int]  # (name, value, depth)
Top = tuple[str, str]  # (scope prefix, top-level name)


def _user_value(name: str, value: Any) -> bool:
    if name.startswith("__") or isinstance(value, types.ModuleType | types.FunctionType | type):
        return False
    return not isinstance(value, types.BuiltinFunctionType | types.MethodType)


def _is_user_instance(value: Any) -> bool:
    """An instance of a class the snippet defined (its attributes are user data)."""
    cls = type(value)
    return getattr(cls, "__module__", None) == "__main__" and hasattr(value, "__dict__")


def named_modules(module: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """``module.named_modules()`` read from ``_modules`` dicts (a subclass cannot change the answer)."""
    memo: set[int] = set()
    stack: list[tuple[str, nn.Module]] = [("", module)]
    while stack:
        name, current = stack.pop()
        if id(current) in memo:
            continue
        memo.add(id(current))
        yield name, current
        children = [(name + ("." if name else "") + key, child)
                    for key, child in _dict_of(current, "_modules").items() if child is not None]
        stack.extend(reversed(children))


def _dict_of(module: nn.Module, attribute: str) -> dict[str, Any]:
    found = vars(module).get(attribute)
    return found if isinstance(found, dict) else {}


def _capped(iterable: Any) -> tuple[int, ...]:
    return tuple(map(id, itertools.islice(iterable, MAX_CONTAINER_ITEMS)))


def fingerprint(value: Any) -> Any:
    """What the names under ``value`` depend on, one level down, by object identity (cheap: C loops)."""
    if isinstance(value, list | tuple):
        return _capped(value)
    if isinstance(value, dict):
        return _capped(value.keys()), _capped(value.values())
    if isinstance(value, nn.Module):
        parts: list[Any] = []
        for _, child in named_modules(value):
            attributes = vars(child)
            parts.append((id(child), _capped(attributes.keys()), _capped(attributes.values()),
                          *(_capped(_dict_of(child, a).values()) for a in ("_parameters", "_buffers"))))
        return tuple(parts)
    attributes = vars(value)
    return _capped(attributes.keys()), _capped(attributes.values())


def members(name: str, value: Any, depth: int) -> list[Member]:
    """The (name, value, depth) of what is one level below ``value``, as the whole snapshot visits it."""
    if isinstance(value, nn.Module):
        return _module_members(name, value, depth)
    if isinstance(value, list | tuple):
        return [(f"{name}[{i}]", item, depth + 1) for i, item in enumerate(value[:MAX_CONTAINER_ITEMS])]
    if isinstance(value, dict):
        return [(f"{name}[{key!r}]", item, depth + 1)
                for key, item in itertools.islice(value.items(), MAX_CONTAINER_ITEMS)]
    return [(f"{name}.{attribute}", item, depth + 1)
            for attribute, item in itertools.islice(vars(value).items(), MAX_CONTAINER_ITEMS)]


def _module_members(name: str, module: nn.Module, depth: int) -> list[Member]:
    """Parameters, then buffers (each once, as ``named_parameters`` does), then plain attributes that
    hold tensors or containers (``self.scale = torch.tensor(2.)``)."""
    found: list[Member] = []
    modules = list(named_modules(module))
    for attribute in ("_parameters", "_buffers"):
        memo: set[int] = set()
        for sub, child in modules:
            prefix = f"{name}.{sub}." if sub else f"{name}."
            for key, tensor in _dict_of(child, attribute).items():
                if tensor is None or id(tensor) in memo:
                    continue
                memo.add(id(tensor))
                found.append((prefix + key, tensor, depth))
    if depth < MAX_CONTAINER_DEPTH:
        for sub, child in modules:
            prefix = f"{name}.{sub}." if sub else f"{name}."
            for attribute, item in itertools.islice(vars(child).items(), MAX_CONTAINER_ITEMS):
                if not attribute.startswith("_") and isinstance(item, torch.Tensor | list | tuple | dict):
                    found.append((prefix + attribute, item, depth + 1))
    return found


def _walkable(value: Any, depth: int) -> bool:
    if isinstance(value, nn.Module):
        return True
    if depth >= MAX_CONTAINER_DEPTH:
        return False
    return isinstance(value, list | tuple | dict) or _is_user_instance(value)


@dataclass
class _Entry:
    fingerprint: Any
    items: list[Item]  # every name under this value, in walk order
    nested: bool  # some member is a container: fetch members again to check those
    child_items: list[list[Item]]  # per nested member, what it contributed
    tensor_addresses: tuple[int, ...]
    used: int


class NameWalker:
    def __init__(self, tensor_ids: ObjectIds) -> None:
        self.tensor_ids = tensor_ids
        self._cache: dict[tuple[int, str, int], _Entry] = {}
        self._by_address: dict[int, set[tuple[int, str, int]]] = {}
        self._step = 0
        self._tops: dict[Top, list[Item]] = {}  # what each top-level name contributed last
        self._top_rank: dict[Top, tuple[int, int]] = {}  # (scope index, index in scope) this step
        self._index: dict[Top, tuple[list[Item], dict[str, int]]] = {}
        self.current: dict[str, str] = {}  # every name now -> tensor id
        self._top_of: dict[str, Top] = {}

    def walk(self, scopes: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, str], list[str]]:
        """(names bound or rebound -> tensor id, names gone), both in walk order."""
        self._step += 1
        for address in self.tensor_ids.take_deaths():
            for key in self._by_address.pop(address, ()):
                self._cache.pop(key, None)  # a tensor it named died: read it again
        bound: dict[str, str] = {}
        gone: list[str] = []
        seen: set[Top] = set()
        self._top_rank = {}
        for scope_index, (prefix, namespace) in enumerate(scopes):
            for top_index, (name, value) in enumerate(list(namespace.items())):
                if (not prefix and name in PRELUDE_NAMES) or not _user_value(name, value):
                    continue
                top = (prefix, name)
                if top in seen:  # a recursive call's frame: the innermost one's names win, as in v1
                    gone.extend(self._drop_top(top))
                seen.add(top)
                self._top_rank[top] = (scope_index, top_index)
                items = self._read(prefix + name, value, 0)
                previous = self._tops.get(top)
                if items is not previous:
                    self._tops[top] = items
                    self._diff(top, previous or [], items, bound, gone)
        for top in [t for t in self._tops if t not in seen]:
            gone.extend(self._drop_top(top))
        for name in gone:
            if name not in self.current:  # gone from one frame, maybe bound again by another
                bound.pop(name, None)
        if self._step % SWEEP_EVERY == 0:
            self._sweep()
        return bound, [name for name in dict.fromkeys(gone) if name not in self.current]

    def position(self, name: str) -> tuple[int, int, int]:
        """Where ``name`` comes in walk order at the latest step."""
        top = self._top_of[name]
        items = self._tops[top]
        cached = self._index.get(top)
        if cached is None or cached[0] is not items:
            cached = self._index[top] = (items, {n: i for i, (n, _) in enumerate(items)})
        return (*self._top_rank[top], cached[1][name])

    def ordered(self) -> Iterator[Item]:
        """Every current name and its tensor, in walk order (for a whole snapshot)."""
        for top in sorted(self._top_rank, key=self._top_rank.__getitem__):
            yield from self._tops.get(top, ())

    def _drop_top(self, top: Top) -> list[str]:
        gone = []
        for name, _ in self._tops.pop(top, []):
            if self._top_of.get(name) == top and self.current.pop(name, None) is not None:
                del self._top_of[name]
                gone.append(name)
        self._index.pop(top, None)
        return gone

    def _diff(self, top: Top, previous: list[Item], items: list[Item], bound: dict[str, str],
              gone: list[str]) -> None:
        start = 0
        if len(items) >= len(previous) and items[: len(previous)] == previous:
            start = len(previous)  # appended to: only the tail is new
        else:
            now = {name for name, _ in items}
            for name, _ in previous:
                if name not in now and self._top_of.get(name) == top:
                    self.current.pop(name, None)
                    del self._top_of[name]
                    gone.append(name)
        for name, tid in itertools.islice(items, start, None):
            self._top_of[name] = top
            if self.current.get(name) != tid:
                self.current[name] = tid
                bound[name] = tid

    # ---- one value, cached -----------------------------------------------------------------------
    def _read(self, name: str, value: Any, depth: int) -> list[Item]:
        if isinstance(value, torch.Tensor):
            return [(name, self.tensor_ids.of(value))]
        if not _walkable(value, depth):
            return []
        key = (id(value), name, depth)
        print_ = fingerprint(value)
        entry = self._cache.get(key)
        if entry is not None and entry.fingerprint == print_:
            entry.used = self._step
            if not entry.nested:
                return entry.items
            items, parts = self._items(members(name, value, depth))
            if all(a is b for a, b in zip(parts, entry.child_items, strict=True)):
                return entry.items
            entry.child_items, entry.items = parts, items
            return items
        found = members(name, value, depth)
        items, parts = self._items(found)
        addresses = tuple(id(v) for _, v, _ in found if isinstance(v, torch.Tensor))
        entry = _Entry(print_, items, len(parts) > 0, parts, addresses, self._step)
        for address in addresses:
            self._by_address.setdefault(address, set()).add(key)
        self._cache[key] = entry
        return items

    def _items(self, found: list[Member]) -> tuple[list[Item], list[list[Item]]]:
        """The names under these members, in order (ids are handed out in this order), and what
        each nested container among them contributed."""
        items: list[Item] = []
        parts: list[list[Item]] = []
        for child_name, child, child_depth in found:
            if isinstance(child, torch.Tensor):
                items.append((child_name, self.tensor_ids.of(child)))
            elif _walkable(child, child_depth):
                part = self._read(child_name, child, child_depth)
                parts.append(part)
                items.extend(part)
        return items, parts

    def _sweep(self) -> None:
        stale = [key for key, entry in self._cache.items() if entry.used < self._step - SWEEP_EVERY]
        for key in stale:
            entry = self._cache.pop(key)
            for address in entry.tensor_addresses:
                holders = self._by_address.get(address)
                if holders is not None:
                    holders.discard(key)
                    if not holders:
                        del self._by_address[address]
