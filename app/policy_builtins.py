"""The builtins a gated snippet sees: a third layer behind the policy gate (``app.policy``), for what
the gate cannot see in the tree (a callee held in a variable). The names the gate refuses are absent;
``__import__`` hands out only the playground's modules; ``type`` answers ``type(x)`` and never makes a
class from a namespace dict; ``setattr``/``delattr`` with a computed name check it as the gate checks
a written one. Pure Python: no torch import.
"""

from __future__ import annotations

import builtins
import sys
import types
from typing import Any

from app.policy_names import (
    ALLOWED_IMPORTS,
    BLOCKED_ATTRIBUTE_PREFIXES,
    BLOCKED_ATTRIBUTES,
    BLOCKED_BUILTINS,
)
from app.run_errors import RefusedAttribute, RefusedType, english


def _guarded_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> Any:  # noqa: A002
    # torch's C++ code imports its own submodules (torch.storage on the first torch.tensor call)
    # through the running frame's builtins, i.e. this function: hand back what is already loaded.
    # numpy's C code does the same (numpy._core._methods on the first .sum()).
    if not level and name.split(".")[0] in ("torch", "numpy") and name in sys.modules:
        return builtins.__import__(name, globals, locals, fromlist, level)
    if level or name not in ALLOWED_IMPORTS:
        raise ImportError(english("policy.import_runtime", {"module": name}))
    return builtins.__import__(name, globals, locals, fromlist, level)


class _TypeOfOne(builtins.type):
    """The metaclass of the ``type`` a gated snippet sees: ``type(x)`` answers x's class, as always,
    but a class is never made from a namespace dict through it — neither ``type(name, bases, dict)``
    nor a metaclass reached as ``type(SomeClass)`` (the gate cannot see what a call's callee holds:
    ``t = type(nn.Module); t("A", (), {...})``). ``isinstance(x, type)`` still answers as usual."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) != 1 or kwargs:
            raise RefusedType("policy.type_class")
        found = builtins.type(args[0])
        if issubclass(found, builtins.type):
            raise RefusedType("policy.type_of_class")
        return found

    def __instancecheck__(cls, instance: Any) -> bool:
        return isinstance(instance, builtins.type)

    def __subclasscheck__(cls, subclass: Any) -> bool:
        return issubclass(subclass, builtins.type)


class _Type(metaclass=_TypeOfOne):
    pass


_Type.__name__ = _Type.__qualname__ = "type"
_Type.__module__ = "builtins"  # shown as <class 'type'>


def _settable(obj: Any, name: Any, call: str) -> None:
    """What the gate checks of ``obj.name = value`` written out, for a name computed at run time:
    no name it refuses, and nothing of a module or of a class the snippet did not define."""
    if not isinstance(name, str):
        return  # the builtin says what is wrong with it
    if (name.startswith("_") or name in BLOCKED_ATTRIBUTES or name.startswith(BLOCKED_ATTRIBUTE_PREFIXES)
            or isinstance(obj, types.ModuleType)
            or (isinstance(obj, builtins.type) and obj.__module__ != "__main__")):
        raise RefusedAttribute("policy.attribute_runtime", {"call": f"{call}(..., {name!r})"})


def _setattr(obj: Any, name: Any, value: Any, /) -> None:
    _settable(obj, name, "setattr")
    builtins.setattr(obj, name, value)


def _delattr(obj: Any, name: Any, /) -> None:
    _settable(obj, name, "delattr")
    builtins.delattr(obj, name)


_setattr.__name__ = _setattr.__qualname__ = "setattr"
_delattr.__name__ = _delattr.__qualname__ = "delattr"


def safe_builtins() -> dict[str, Any]:
    namespace = {k: v for k, v in vars(builtins).items() if k not in BLOCKED_BUILTINS}
    namespace["__import__"] = _guarded_import
    namespace["type"] = _Type
    namespace["setattr"] = _setattr
    namespace["delattr"] = _delattr
    return namespace
