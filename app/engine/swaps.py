"""``torch.utils.swap_tensors`` as in a plain run, though the engine holds weak references.

``swap_tensors(t1, t2)`` refuses a tensor that has any weak reference, and the engine keeps one to
every tensor it has met (``app.engine.ids``: the object is the identity, held weakly). So the swap a
plain run makes — the snippet's own, or ``nn.Module``'s when converting with
``torch.__future__.set_swap_module_params_on_conversion(True)`` — failed under the engine with
"Cannot swap t1 because it has weakref associated with it". While the run lasts, ``torch.utils``
hands out torch's own function, run with a ``weakref`` module that leaves the engine's references
out of its count (the snippet's own weak references still count). The two objects keep their
identities, so their ids stand; what they hold changed behind every torch call, so the step after
a swap is read whole (``on_swap``).
"""

from __future__ import annotations

import types
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch.utils

from app.engine.ids import _AddressRef


class _WeakrefPastTheEngine:
    """``weakref`` as ``swap_tensors`` uses it, not counting the engine's own references."""

    def __getattr__(self, name: str) -> Any:
        return getattr(weakref, name)

    @staticmethod
    def getweakrefs(obj: Any) -> list[Any]:
        return [ref for ref in weakref.getweakrefs(obj) if not isinstance(ref, _AddressRef)]


@contextmanager
def swaps_allowed(on_swap: Callable[[], None]) -> Iterator[None]:
    original = torch.utils.swap_tensors
    globals_ = {**original.__globals__, "weakref": _WeakrefPastTheEngine()}
    unseen = types.FunctionType(original.__code__, globals_, original.__name__, original.__defaults__,
                                original.__closure__)

    def swap_tensors(t1: Any, t2: Any) -> None:
        on_swap()
        return unseen(t1, t2)

    swap_tensors.__doc__ = original.__doc__
    torch.utils.swap_tensors = swap_tensors
    try:
        yield
    finally:
        torch.utils.swap_tensors = original
