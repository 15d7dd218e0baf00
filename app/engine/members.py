"""What a value is and what is one level below it, read through the built-in types, never by running
the snippet's code: containers through their built-in types' methods (a list subclass's
``__getitem__``, a key's ``__repr__``, a module's overridden ``named_parameters`` or
``__getattribute__`` are never called), objects through ``object.__getattribute__(obj, "__dict__")``,
kinds by ``type(obj)`` (never ``obj.__class__``). The name walker (``app.engine.names``) names what
these give; ``app.engine.fingerprints`` says, by identity, whether it changed.
"""

from __future__ import annotations

import collections
import itertools
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from app.engine.tracer import SNIPPET_FILENAME

MAX_CONTAINER_ITEMS = 10_000  # items read per container (its fingerprint costs this much per step)
SNIPPET_MODULE = "__main__"

Member = tuple[str, Any]  # (name, value)


SEQUENCES: tuple[tuple[type, Callable[[Any], Iterator[Any]]], ...] = (
    (list, list.__iter__), (tuple, tuple.__iter__), (collections.deque, collections.deque.__iter__),
)
SETS: tuple[tuple[type, Callable[[Any], Iterator[Any]]], ...] = (
    (set, set.__iter__), (frozenset, frozenset.__iter__),
)
_KINDS: dict[type, str | None] = {}
_UNKNOWN = "?"
_MODULE_INTERNALS = frozenset(vars(nn.Module()))  # _parameters, _buffers, _modules, the hook dicts...
type_dict = type.__dict__["__dict__"].__get__  # a class's own namespace, without its metaclass


def _type_kind(cls: type) -> str | None:
    """The kind every instance of ``cls`` has (None: depends on the value, or nothing to read)."""
    if issubclass(cls, torch.Tensor):
        return "tensor"
    if issubclass(cls, np.ndarray):
        return "array"  # named like a tensor; its facts are read by app.engine.arrays
    if issubclass(cls, nn.Module):
        return "module"
    if issubclass(cls, torch.optim.Optimizer):
        return "optimizer"
    if issubclass(cls, tuple) and any("_fields" in type_dict(k) for k in cls.__mro__[:-2]):
        return "namedtuple"
    if any(issubclass(cls, base) for base, _ in SEQUENCES):
        return "sequence"
    if issubclass(cls, dict):
        return "dict"
    if any(issubclass(cls, base) for base, _ in SETS):
        return "set"
    if type_dict(cls).get("__module__") == SNIPPET_MODULE and not issubclass(cls, type):
        return "object"  # an instance of a class the snippet defined
    return None


def kind_of(value: Any) -> str | None:
    """tensor, array (a numpy ndarray), module, optimizer, sequence, namedtuple, dict, set, object (an
    instance of a snippet class), class (a snippet class), function (a snippet function), or None
    (nothing to read)."""
    cls = type(value)
    kind = _KINDS.get(cls, _UNKNOWN)
    if kind is _UNKNOWN:
        kind = _type_kind(cls)
        if type_dict(cls).get("__module__") != SNIPPET_MODULE:  # the snippet's classes stay uncached:
            _KINDS[cls] = kind  # the cache must not keep them alive
    if kind is not None:
        return kind
    if issubclass(cls, type):  # type(value) is a metaclass: is it one of the snippet's classes?
        return "class" if type_dict(value).get("__module__") == SNIPPET_MODULE else None
    if cls is types.FunctionType and value.__code__.co_filename == SNIPPET_FILENAME:
        return "function"
    return None


def iterate(value: Any, table: tuple[tuple[type, Callable[[Any], Iterator[Any]]], ...]) -> Iterator[Any]:
    """The built-in iteration of the built-in base class: a subclass's overrides do not run."""
    for base, iterate in table:
        if issubclass(type(value), base):
            return itertools.islice(iterate(value), MAX_CONTAINER_ITEMS)
    return iter(())


def iterate_sequence(value: Any) -> Iterator[Any]:
    """A list's, tuple's or deque's items, read by the built-in type (capped)."""
    return iterate(value, SEQUENCES)


def set_members(value: Any) -> list[Any]:
    """A set's or frozenset's members, in its iteration order, read by the built-in type (capped;
    under the cap without ``islice``: read at every step, ~3 µs of a set of 800)."""
    base = set if issubclass(type(value), set) else frozenset
    if base.__len__(value) <= MAX_CONTAINER_ITEMS:
        return list(base.__iter__(value))
    return list(iterate(value, SETS))


def object_dict(value: Any) -> dict[str, Any]:
    """``vars(value)`` without running an overridden ``__getattribute__``."""
    try:
        found = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return {}
    return found if type(found) is dict else {}


def _slots(value: Any) -> list[tuple[str, Any]]:
    """``__slots__`` values, read by the slots' own (C) descriptors."""
    found = []
    for cls in type(value).__mro__[:-1]:
        for attribute, descriptor in type_dict(cls).items():
            if type(descriptor) is types.MemberDescriptorType:
                try:
                    found.append((attribute, descriptor.__get__(value, cls)))
                except AttributeError:  # declared, never set
                    continue
    return found


def _capped_items(items: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return list(itertools.islice(items, MAX_CONTAINER_ITEMS))


def attributes(value: Any, kind: str) -> list[tuple[str, Any]]:
    """Attribute name -> value of an instance of a snippet class, or of a snippet class itself."""
    if kind == "class":
        return _capped_items((a, v) for a, v in type_dict(value).items()
                             if not a.startswith("__") and type(v) is not types.FunctionType)
    return _capped_items(itertools.chain(object_dict(value).items(), _slots(value)))


def cells(function: types.FunctionType) -> list[tuple[str, Any]]:
    found = []
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=False):
        try:
            found.append((name, cell.cell_contents))
        except ValueError:  # not bound yet
            continue
    return found


def optimizer_state(optimizer: torch.optim.Optimizer) -> list[tuple[int, Any]]:
    """(index, state dict) per parameter, the index counted over ``param_groups`` as
    ``state_dict()`` counts it."""
    attributes = object_dict(optimizer)
    groups, state = attributes.get("param_groups"), attributes.get("state")
    if not issubclass(type(groups), list) or not issubclass(type(state), dict):
        return []
    by_id = {id(key): entry for key, entry in dict.items(state)}
    found = []
    index = 0
    for group in list.__iter__(groups):
        params = dict.get(group, "params", ()) if issubclass(type(group), dict) else ()
        for param in iterate(params, SEQUENCES):
            entry = by_id.get(id(param))
            if entry is not None:
                found.append((index, entry))
            index += 1
    return found


_PLAIN_KEYS = frozenset({str, int, float, bool, bytes, complex, type(None)})


def key_text(key: Any) -> str:
    """How a dict key reads in a name, without running the key's own ``__repr__``."""
    cls = type(key)
    if cls in _PLAIN_KEYS:
        return repr(key)
    if cls is tuple:
        inner = ", ".join(key_text(k) for k in tuple.__iter__(key))
        return f"({inner},)" if len(key) == 1 else f"({inner})"
    member = object_dict(key).get("_name_")  # an Enum member: Color.RED
    if type(member) is str:
        return f"{cls.__name__}.{member}"
    for base in (str, int, float, bytes):  # a subclass: read as its base
        if issubclass(cls, base):
            return base.__repr__(key)
    return f"<{cls.__name__}>"


def dict_members(name: str, value: dict, start: int = 0, seen: dict[str, int] | None = None) -> list[Member]:
    """``d[key]`` members, from the ``start``-th item on; ``seen``: how many earlier keys wrote as
    each text (two keys that print alike are ``d[1]`` and ``d[1#2]``), updated in place."""
    found = []
    seen = {} if seen is None else seen
    for key, item in itertools.islice(dict.items(value), start, MAX_CONTAINER_ITEMS):
        text = key_text(key)
        count = seen[text] = seen.get(text, 0) + 1
        found.append((f"{name}[{text}]" if count == 1 else f"{name}[{text}#{count}]", item))
    return found



def members(name: str, value: Any, kind: str, start: int = 0) -> list[Member]:
    """The (name, value) of what is one level below ``value``, as the whole snapshot visits it
    (``start``: a sequence's members from that index on)."""
    if kind == "module":
        return _module_members(name, value)
    if kind == "sequence":
        cls = type(value)  # (not isinstance(): it may ask the object for its __class__)
        if start and issubclass(cls, list | tuple):  # a grown list's tail, without walking its head
            base = list if issubclass(cls, list) else tuple
            items = base.__getitem__(value, slice(start, MAX_CONTAINER_ITEMS))
        else:
            items = itertools.islice(iterate(value, SEQUENCES), start, None)
        return [(f"{name}[{i}]", item) for i, item in enumerate(items, start)]
    if kind == "namedtuple":
        fields = next(type_dict(k)["_fields"] for k in type(value).__mro__ if "_fields" in type_dict(k))
        return [(f"{name}.{field}" if type(field) is str else f"{name}[{i}]", item)
                for i, (field, item) in enumerate(zip(fields, iterate(value, SEQUENCES), strict=False))]
    if kind == "dict":
        return dict_members(name, value)
    if kind == "set":
        return [(f"{name}{{{i}}}", item) for i, item in enumerate(iterate(value, SETS))]
    if kind == "optimizer":
        return [(f"{name}.state[{index}]", entry) for index, entry in optimizer_state(value)]
    if kind == "function":
        return [(f"{name}.<closure>.{cell}", item) for cell, item in cells(value)]
    return [(f"{name}.{attribute}", item) for attribute, item in attributes(value, kind)]


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
                    for key, child in _dict_of(current, "_modules").items() if kind_of(child) == "module"]
        stack.extend(reversed(children))


def _dict_of(module: nn.Module, attribute: str) -> dict[str, Any]:
    found = object_dict(module).get(attribute)
    return found if type(found) is dict else {}


def _module_members(name: str, module: nn.Module) -> list[Member]:
    """Parameters, then buffers (each once, as ``named_parameters`` does), then the other attributes
    that hold tensors or containers (``self.scale = torch.tensor(2.)``, ``self._hidden``)."""
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
                found.append((prefix + key, tensor))
    for sub, child in modules:
        prefix = f"{name}.{sub}." if sub else f"{name}."
        for attribute, item in itertools.islice(object_dict(child).items(), MAX_CONTAINER_ITEMS):
            if attribute not in _MODULE_INTERNALS and kind_of(item) not in (None, "module"):
                found.append((prefix + attribute, item))
    return found
