"""What a line may have changed, noted while it runs, so the snapshot after it re-reads only that.

Tensors change in three ways, and each is seen here:

* a torch function or method that writes its arguments (``add_``, ``x[0] = 1``, ``x.grad = g``,
  ``x.data = y``, ``requires_grad_()``, ``out=``, ``bn(x)``'s running statistics): a
  ``TorchFunctionMode`` sees every such call from Python, with its arguments, and
  ``app.engine.writes`` says which of them it writes — by the op's schema, the writes schemas leave
  out, and the versions that moved across a call whose insides run unseen. Calls that only read are
  let through untouched.
* ``backward()`` / ``torch.autograd.grad``: the engine writes ``.grad`` and frees saved tensors in C++;
  the call of ``torch.autograd.graph._engine_run_backward`` is seen by the tracer, and everything
  reachable from its roots is marked.
* memory written behind torch's back: a storage handed to Python (``untyped_storage()``, ``.numpy()``,
  ``__dlpack__``) is *volatile* from then on and re-read at every step.

A few calls bypass torch functions altogether (``Tensor.set_``, ``torch.utils.swap_tensors``); a line
that may make them asks for a whole snapshot (``Touches.whole``).
"""

from __future__ import annotations

import re
import sys
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from app.engine.calls import CALLS, call_at
from app.engine.frames import HANDLE_TORCH_FUNCTION
from app.engine.ids import tensor_pointer
from app.engine.writes import EXPOSES, READS, WRITES, WritePlan, moved, plan_of, tensors_in, versions_of

# Snippet source that may change tensors in ways no torch function call shows.
# (``.metadata``: a node's metadata dict written, which nothing else sees; app.engine.hooks;
# ``register_hooks``: a saved tensor's own pack hook, ``y.grad_fn._raw_saved_self.register_hooks``,
# which packs at once: the node then holds what it returned)
_Tensor = torch.Tensor
_DISABLED = torch._C._disabled_torch_function_impl
_function_modes = torch._C._len_torch_function_stack
_getframe = sys._getframe
_gettrace = sys.gettrace
_settrace = sys.settrace
_NO_KWARGS: dict[str, Any] = {}  # (never changed: a call's ``**kwargs`` is a new dict)
# ``types`` with nothing but torch's own tensor and parameter types (see ``__torch_function__``)
_PLAIN_TYPES = frozenset({(_Tensor,), (torch.nn.Parameter,), (_Tensor, torch.nn.Parameter),
                          (torch.nn.Parameter, _Tensor)})

WHOLE_SNAPSHOT = re.compile(r"\bset_\s*\(|swap_tensors|_swap_tensor_impl|__setstate__|\.metadata\b"
                            r"|\bregister_hooks\b")


def _overridden(types: Any) -> bool:
    """Whether a type among them (beside torch's own Tensor) has a __torch_function__ of its own."""
    for type_ in types:
        if type_ is not _Tensor and getattr(type_, "__torch_function__", None) is not _DISABLED:
            return True
    return False


class Touches(TorchFunctionMode):
    """The tensors (and storages) a line's torch calls may have written, by address."""

    def __init__(self) -> None:
        super().__init__()
        self._plans: dict[Any, WritePlan] = {}
        # the one-line call function of each call site, by its code's id and instruction (_site)
        self._sites: dict[tuple[int, int], Any] = {}
        self._codes: list[Any] = []
        self.tensors: set[int] = set()  # addresses of tensor objects
        self.storages: set[int] = set()  # where storages' bytes start (app.engine.ids.tensor_pointer)
        self.exposed: set[int] = set()  # storages whose memory was handed out
        # What backward passes of the line may have changed: node identity keys, leaf addresses.
        self.backward_nodes: set[Any] = set()
        self.backward_leaves: set[int] = set()
        self.whole = False

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # The tracer's trace function is off while the engine's own bookkeeping runs, and on again
        # for the call itself (the snippet's code it calls back — hooks, a subclass's
        # __torch_function__ — and torch's backward entry are seen as before): while a trace
        # function is set, Python 3.11 runs every bytecode of every frame on its slow path
        # (unspecialised, its line looked up) and calls the trace function for each new frame —
        # this method's and its helpers' too, at every torch call of the snippet.
        trace = _gettrace()
        if trace is not None:
            _settrace(None)
        try:
            plan = self._plans.get(func)
            if plan is None:
                plan = self._plans[func] = plan_of(func)
            if kwargs is None:
                kwargs = _NO_KWARGS
            tensors = before = None  # those whose versions are compared across the call
            subclassed = False
            kind = plan.kind
            if kind != READS or (kwargs and not plan.keys.isdisjoint(kwargs)):
                # ``types``: the tensor types among the arguments, the snippet's subclasses that
                # override __torch_function__ among them: the engine's own reads of those (versions,
                # data pointers) must not call it — it is the snippet's code (``subclassed``). torch
                # lists plain tensors and parameters among them too (a Parameter's
                # __torch_function__ is torch's disabled one): reading those plainly spares a
                # DisableTorchFunction block each. A mode of the snippet's still on the stack below
                # this one (this one pushed again during backward) would see the reads: then they
                # are made with torch functions off too.
                subclassed = _function_modes() > 0 or (
                    (type(types) is not tuple or types not in _PLAIN_TYPES) and _overridden(types))
                if kind == WRITES:
                    # what it only reads is not marked (nor the storages under it); most writes
                    # are of the first argument alone (``p.addcdiv_(a, b, value=-lr)``)
                    if plan.self_only and (not kwargs or plan.keys.isdisjoint(kwargs)):
                        self._note(args[:1], WRITES, subclassed)
                    else:
                        self._note(plan.written(args, kwargs), WRITES, subclassed)
                    if plan.versions:
                        tensors = tensors_in(args)
                        if kwargs:
                            tensors += tensors_in(kwargs.values())
                        before = versions_of(tensors, subclassed)
                elif kind == EXPOSES:
                    self._note(args, EXPOSES, subclassed)
                    self._note(tuple(kwargs.values()), WRITES, subclassed)
                else:
                    self._note(plan.written(args, kwargs), WRITES, subclassed)  # ``out=``
            # The call, made as the snippet made it (app.engine.calls; here, not in a helper
            # there: a frame less at every torch call): from the frame above this one, or above a
            # Python function's handle_torch_function and the function's first entry. Its one-line
            # function is looked up by the caller's code and instruction (``f_lineno`` walks the
            # code's line table: a microsecond deep in a long function like Adam's).
            caller = _getframe(1)
            code = caller.f_code
            if code is HANDLE_TORCH_FUNCTION:
                entry = caller.f_back  # the Python function's first entry
                if entry is not None and entry.f_back is not None:
                    caller = entry.f_back
                    code = caller.f_code
            call = self._sites.get((id(code), caller.f_lasti))
            if call is None or call.__globals__ is not caller.f_globals:
                call = self._site(caller)
        except BaseException:
            if trace is not None:
                _settrace(trace)
            raise
        # (the call's frame sets the trace function again: app.engine.calls)
        try:
            if tensors is None:
                return call(func, args, kwargs, caller, trace)
            try:
                return call(func, args, kwargs, caller, trace)
            finally:
                # what its insides wrote in place moved its version
                self._moved(tensors, before, subclassed)
        except BaseException:
            if trace is not None and _gettrace() is None:
                # the call's frame failed before its first line (RecursionError); or the tracer
                # went off on purpose inside it (app.engine.run._Unrecorded: past the step limit),
                # which on again costs time only
                _settrace(trace)
            raise

    def _moved(self, tensors: list[torch.Tensor], before: Any, subclassed: bool) -> None:
        trace = _gettrace()  # (not the one before the call: the call may have ended the tracing)
        if trace is not None:
            _settrace(None)
        try:
            written = moved(tensors, before, subclassed)
            if written:
                self._note(written, WRITES, subclassed)
        finally:
            if trace is not None:
                _settrace(trace)

    def _site(self, caller: FrameType) -> Any:
        """The one-line function that makes a call from ``caller``'s file and line (app.engine.calls),
        kept for its code and instruction while the run lasts (the code too: its ``id`` is not
        reused while it is kept)."""
        code = caller.f_code
        call = CALLS.get((code.co_filename, caller.f_lineno))
        if call is None or call.__globals__ is not caller.f_globals:
            call = call_at(caller)
        self._sites[(id(code), caller.f_lasti)] = call
        self._codes.append(code)
        return call

    def watch_again(self) -> bool:
        """Push this mode again if torch popped it (it does while one of its calls runs — and the
        snippet's backward hooks run inside backward()); True if it was pushed, to ``unwatch``."""
        if self in torch.overrides._get_current_function_mode_stack():
            return False
        self.__enter__()
        return True

    def unwatch(self) -> None:
        self.__exit__(None, None, None)

    def note_result(self, value: Any) -> None:
        """What a torch function returned gained facts the line's step must read again."""
        self._note(value if isinstance(value, list | tuple) else (value,), WRITES, True)

    def _note(self, values: Any, kind: int, subclassed: Any = False) -> None:
        if subclassed:  # (see __torch_function__'s ``types``)
            with torch._C.DisableTorchFunction():
                self._note(values, kind)
            return
        for value in values:
            if isinstance(value, torch.Tensor):
                self.tensors.add(id(value))
                pointer = tensor_pointer(value)  # never a storage object: see tensor_pointer
                if pointer:
                    self.storages.add(pointer)
                    if kind == EXPOSES:
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
