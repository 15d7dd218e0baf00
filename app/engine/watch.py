"""What a line may have changed, noted while it runs, so the snapshot after it re-reads only that.

Tensors change in three ways, and each is seen here:

* a torch function or method that writes its arguments (``add_``, ``x[0] = 1``, ``x.grad = g``,
  ``x.data = y``, ``requires_grad_()``, ``out=``, ``inplace=True``): a ``TorchFunctionMode`` sees every
  such call from Python, with its arguments — of a built-in one, only those its ATen schema says it
  writes (``self``, ``out=``), where it says so. Calls that only read are let through untouched.
* ``backward()`` / ``torch.autograd.grad``: the engine writes ``.grad`` and frees saved tensors in C++;
  the call of ``torch.autograd.graph._engine_run_backward`` is seen by the tracer, and everything
  reachable from its roots is marked.
* memory written behind torch's back: a storage handed to Python (``untyped_storage()``, ``.numpy()``,
  ``__dlpack__``) is *volatile* from then on and re-read at every step.

A few calls bypass torch functions altogether (``Tensor.set_``, ``torch.utils.swap_tensors``); a line
that may make them asks for a whole snapshot (``Touches.whole``).
"""

from __future__ import annotations

import functools
import re
import sys
import types
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from app.engine.ids import tensor_pointer

IN_PLACE_DUNDERS = frozenset({
    "__setitem__", "__delitem__", "__set__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
    "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
    "__irshift__", "__imatmul__",
})
# Methods that change what the trace shows of a tensor without an underscore in their name.
MUTATING_NAMES = frozenset({"retain_grad", "register_hook", "register_post_accumulate_grad_hook"})
# Calls that hand the tensor's memory to code that may write it without telling torch.
EXPOSING_NAMES = frozenset({"untyped_storage", "storage", "numpy", "__dlpack__", "__array__",
                            "__array_wrap__", "_typed_storage"})
# Snippet source that may change tensors in ways no torch function call shows.
# (``.metadata``: a node's metadata dict written, which nothing else sees; app.engine.hooks)
WHOLE_SNAPSHOT = re.compile(r"\bset_\s*\(|swap_tensors|_swap_tensor_impl|__setstate__|\.metadata\b")


# A warning torch raises from C++ names the Python frame that made the call: make that the caller's
# line, not this module's, so the snippet's output reads as it would without us. The call runs in
# a one-line code object compiled with the caller's file name and line number (and its globals, for
# the warnings registry). Its name is one the tracer skips (``app.engine.tracer.INLINE_FRAMES``).
CALL_FRAME = "<torch-call>"
_call_codes: dict[tuple[str, int], Any] = {}


def call_as_caller(caller: Any, func: Any, args: Any, kwargs: Any) -> Any:
    key = (caller.f_code.co_filename, caller.f_lineno)
    code = _call_codes.get(key)
    if code is None:
        source = "\n" * (max(key[1], 1) - 1) + "__r = __f(*__a, **__k)"
        code = _call_codes[key] = compile(source, key[0], "exec").replace(co_name=CALL_FRAME)
    slot = {"__f": func, "__a": args, "__k": kwargs}
    exec(code, caller.f_globals, slot)  # noqa: S102 - our own one-line call
    return slot["__r"]


def _kind(func: Any) -> int:
    """0: only reads; 1: may write its tensor arguments; 2: exposes their memory."""
    name = getattr(func, "__name__", "")
    if name in EXPOSING_NAMES:
        return 2
    if name in IN_PLACE_DUNDERS or name in MUTATING_NAMES:
        return 1
    if name.endswith("_") and not name.endswith("__"):
        return 1
    return 0


_BUILT_IN = (types.BuiltinFunctionType, types.MethodDescriptorType)


@functools.cache  # torch's functions live as long as the process; their schemas never change
def _writes_first_only(func: Any) -> bool:
    """True when a built-in torch function or Tensor method writes none of its tensor arguments but
    its first (``self``) and its ``out=``, by the alias annotations of its ATen schemas
    (``Tensor(a!)``): ``p.addcdiv_(exp_avg, denom)`` only reads ``exp_avg`` and ``denom``. False
    where that cannot be known (Python functions, dunders, an op that writes more, no schema)."""
    name = getattr(func, "__name__", "")
    if not isinstance(func, _BUILT_IN) or name.startswith("__"):
        return False
    written: set[Any] = set()
    try:  # (asked inside the snippet's own torch call: whatever torch raises here, mark all)
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            return False
        for overload in packet.overloads():
            for index, argument in enumerate(getattr(packet, overload)._schema.arguments):
                alias = argument.alias_info
                if alias is not None and alias.is_write:
                    written.add("out" if argument.kwarg_only and argument.name == "out" else index)
    except Exception:  # noqa: BLE001
        return False
    return bool(written) and written <= {0, "out"}


class Touches(TorchFunctionMode):
    """The tensors (and storages) a line's torch calls may have written, by address."""

    def __init__(self) -> None:
        super().__init__()
        self._kinds: dict[Any, int] = {}
        self.tensors: set[int] = set()  # addresses of tensor objects
        self.storages: set[int] = set()  # where storages' bytes start (app.engine.ids.tensor_pointer)
        self.exposed: set[int] = set()  # storages whose memory was handed out
        # What backward passes of the line may have changed: node identity keys, leaf addresses.
        self.backward_nodes: set[Any] = set()
        self.backward_leaves: set[int] = set()
        self.whole = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        kind = self._kinds.get(func)
        if kind is None:
            kind = self._kinds[func] = _kind(func)
        if kind or "out" in kwargs or kwargs.get("inplace"):
            # what it only reads is not marked (nor the storages under it)
            if kind == 1 and _writes_first_only(func):
                self._note(args[:1], 1)
                self._note((kwargs.get("out"),), 1)
            else:
                self._note(args, 2 if kind == 2 else 1)
                self._note(tuple(kwargs.values()), 1)
        return call_as_caller(sys._getframe(1), func, args, kwargs)

    def watch_again(self) -> bool:
        """Push this mode again if torch popped it (it does while one of its calls runs — and the
        snippet's backward hooks run inside backward()); True if it was pushed, to ``unwatch``."""
        if self in torch.overrides._get_current_function_mode_stack():
            return False
        self.__enter__()
        return True

    def unwatch(self) -> None:
        self.__exit__(None, None, None)

    def _note(self, values: Any, kind: int) -> None:
        for value in values:
            if isinstance(value, torch.Tensor):
                self.tensors.add(id(value))
                pointer = tensor_pointer(value)  # never a storage object: see tensor_pointer
                if pointer:
                    self.storages.add(pointer)
                    if kind == 2:
                        self.exposed.add(pointer)
            elif isinstance(value, list | tuple):
                self._note(value, kind)

    def clear(self) -> None:
        self.tensors.clear()
        self.storages.clear()
        self.exposed.clear()
        self.backward_nodes.clear()
        self.backward_leaves.clear()
        self.whole = False
