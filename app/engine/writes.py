"""Which arguments a torch call writes, so the step after it reads them again.

torch says so in three places, and a call is asked all three, never its name alone:

* **The op's schema.** A built-in function or method is an ATen op, whose schema marks every
  argument it writes with an alias annotation: ``add_(Tensor(a!) self, ...)``,
  ``_fused_adam_(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, ...)``,
  ``_native_batch_norm_legit(..., Tensor(a!) running_mean, ...)``, ``out=`` arguments. Only those
  are marked: ``p.addcdiv_(exp_avg, denom)`` only reads ``exp_avg``.
* **What the schemas leave out** (``UNDECLARED``): the batch-norm kernels update their running
  statistics in place, without moving their version counter, under schemas (``batch_norm``,
  ``native_batch_norm``, ...) that call them read-only.
* **Version counters**, for calls whose insides the engine cannot see: a torch function written in
  Python (``F.embedding`` renorms its weight, ``F.leaky_relu(x, 0.2, True)`` and ``nn.Dropout(
  inplace=True)`` write in place, none of it announced by name) runs with the engine's mode popped.
  Every in-place write torch makes moves the version of what it writes: the tensor arguments whose
  version moved across the call were written. (A built-in's insides need no such check: an op
  that is a composition of others must declare what it writes for autograd's sake, and the
  schemas' one known lapse is ``UNDECLARED``.)

Plans are made once per function object (torch's functions live as long as the process).
"""

from __future__ import annotations

import inspect
import operator
import types
from collections.abc import Iterator
from typing import Any

import torch

IN_PLACE_DUNDERS = frozenset({
    "__setitem__", "__delitem__", "__set__", "__delete__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
    "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__",
    "__irshift__", "__imatmul__",
})
# Methods that change what the trace shows of a tensor without an ATen op to say so.
MUTATING_NAMES = frozenset({"retain_grad", "register_hook", "register_post_accumulate_grad_hook"})
# Calls that hand the tensor's memory to code that may write it without telling torch.
EXPOSING_NAMES = frozenset({"untyped_storage", "storage", "numpy", "__dlpack__", "__array__",
                            "__array_wrap__", "_typed_storage"})

# Writes the ATen schemas do not declare, by op: (the arguments written, the argument that must be
# true for them to be). torch's own functional twin of these kernels, ``_native_batch_norm_legit``,
# declares the same two ``Tensor(a!)``; tests/engine/test_engine_writes.py checks every entry
# against torch (the values move, the version does not).
_RUNNING_STATS = ("running_mean", "running_var")
UNDECLARED: dict[str, tuple[tuple[str, ...], str]] = {
    "batch_norm": (_RUNNING_STATS, "training"),
    "native_batch_norm": (_RUNNING_STATS, "training"),
    "_batch_norm_impl_index": (_RUNNING_STATS, "training"),
    "cudnn_batch_norm": (_RUNNING_STATS, "training"),
    "miopen_batch_norm": (_RUNNING_STATS, "training"),
    "instance_norm": (_RUNNING_STATS, "use_input_stats"),
}

_BUILT_IN = (types.BuiltinFunctionType, types.MethodDescriptorType)
READS, WRITES, EXPOSES = 0, 1, 2


class WritePlan:
    """What one torch function writes: ``kind`` READS (nothing), WRITES (``written``), EXPOSES (its
    tensor arguments' memory is handed out). ``all_args``: every argument may be written (nothing
    narrower is known); else ``positions`` and ``names`` (of the schema, or of the Python signature)
    are written, and each ``flagged`` entry ``(position, name, flag position, flag name)`` is when
    the flag argument is true. ``versions``: compare the tensor arguments' versions across the call."""

    __slots__ = ("kind", "all_args", "positions", "names", "flagged", "versions", "self_only", "keys")

    def __init__(self, kind: int = READS, all_args: bool = False, positions: frozenset[int] = frozenset(),
                 names: frozenset[str] = frozenset(),
                 flagged: tuple[tuple[int, str, int, str], ...] = (), versions: bool = False) -> None:
        self.kind = kind
        self.all_args = all_args
        self.positions = positions
        self.names = names
        self.flagged = flagged
        self.versions = versions
        # ``written`` of a call without keyword arguments is its first argument (``x.add_(y)``, most
        # writes): the mode takes it without the call of ``written``
        self.self_only = not all_args and positions == frozenset({0}) and not flagged
        # the keyword arguments that may make ``written`` more than the positions say: a call with
        # none of them writes its positions only (``p.addcdiv_(a, b, value=-lr)``: its first)
        self.keys = names | {"out", "inplace"}

    def written(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The arguments (tensors, or lists of them) this call writes, by what its schema says. (A
        list, not a generator: each resumption of one is a call of the tracer's trace function.)"""
        if self.all_args:
            return [*args, *kwargs.values()]
        found = []  # (loops, not comprehensions: each of those is a frame, so a trace call, too)
        for position in self.positions:
            if position < len(args):
                found.append(args[position])
        if kwargs:
            for name in self.names:
                if name in kwargs:
                    found.append(kwargs[name])
        for position, name, flag_position, flag_name in self.flagged:
            flag = args[flag_position] if flag_position < len(args) else kwargs.get(flag_name)
            if flag:
                found.append(args[position] if position < len(args) else kwargs.get(name))
        if kwargs:
            if "out" in kwargs and "out" not in self.names:
                found.append(kwargs["out"])  # a Python function's ``out=`` (F.normalize)
            if kwargs.get("inplace"):
                found += args[:1]
        return found


def plan_of(func: Any) -> WritePlan:
    name = getattr(func, "__name__", "")
    if name == "__get__" and isinstance(func, types.MethodWrapperType):
        # A tensor attribute read (``p.grad``, ``x.data``, ``x.T``): a C getter of torch's, which
        # writes nothing (a quarter of Adam's torch calls: its parameters' .grad)
        return WritePlan()
    if name in EXPOSING_NAMES:
        return WritePlan(EXPOSES, all_args=True)
    if name in IN_PLACE_DUNDERS or name in MUTATING_NAMES:
        return WritePlan(WRITES, all_args=True)
    trailing = name.endswith("_") and not name.endswith("__")  # ``nn.init.uniform_``: in place by name
    if isinstance(func, _BUILT_IN):
        plan = _schema_plan(name) if not name.startswith("__") else None
        if plan is None or (trailing and plan.kind == READS):
            # no schema to ask, or one that declares nothing for an op named in place: all of them
            return WritePlan(WRITES, all_args=True) if trailing else WritePlan()
        return plan
    # Written in Python: its insides run unseen (the mode is popped while it runs)
    plan = _signature_plan(func, name)
    if trailing:
        plan.kind, plan.all_args = WRITES, True
    return plan


def _schema_plan(name: str) -> WritePlan | None:
    """The plan of a built-in by its ATen op's schemas (every overload: the Python binding picks one
    by the arguments given); None when there is no such op."""
    try:  # (asked inside the snippet's own torch call: whatever torch raises here, it is no answer)
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            return None
        schemas = [getattr(packet, overload)._schema for overload in packet.overloads()]
    except Exception:  # noqa: BLE001
        return None
    positions: set[int] = set()
    names: set[str] = set()
    flagged: list[tuple[int, str, int, str]] = []
    undeclared = UNDECLARED.get(name)
    for schema in schemas:
        arguments = schema.arguments
        for index, argument in enumerate(arguments):
            alias = argument.alias_info
            if alias is not None and alias.is_write:
                names.add(argument.name)
                if not argument.kwarg_only:
                    positions.add(index)
        if undeclared is not None:
            flagged.extend(_flagged(undeclared, [a.name for a in arguments]))
    # (an ``out=`` alone is looked for only in a call that has keyword arguments: most have none)
    return WritePlan(WRITES if positions or flagged else READS, positions=frozenset(positions),
                     names=frozenset(names), flagged=tuple(flagged))


def _signature_plan(func: Any, name: str) -> WritePlan:
    """A torch function written in Python: its tensor arguments' versions are compared across the
    call, and if it is the Python face of an op with undeclared writes (``F.batch_norm`` for
    ``batch_norm``), the arguments of the same names are written."""
    flagged: tuple[tuple[int, str, int, str], ...] = ()
    undeclared = UNDECLARED.get(name)
    if undeclared is not None:
        try:
            parameters = list(inspect.signature(func).parameters)
        except (TypeError, ValueError):
            parameters = []
        flagged = tuple(_flagged(undeclared, parameters))
    return WritePlan(WRITES, flagged=flagged, versions=True)


def _flagged(undeclared: tuple[tuple[str, ...], str],
             parameters: list[str]) -> Iterator[tuple[int, str, int, str]]:
    written, flag = undeclared
    if flag not in parameters:
        return
    for name in written:
        if name in parameters:
            yield parameters.index(name), name, parameters.index(flag), flag


def tensors_in(values: Any) -> list[torch.Tensor]:
    """The tensors among call arguments (and in lists or tuples of them, one level deep)."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, torch.Tensor):
                    found.append(item)
    return found


_version = operator.attrgetter("_version")


def versions_of(tensors: list[torch.Tensor], subclassed: Any = False) -> list[int | None]:
    """Their version counters; None for an inference tensor, which keeps none. (Read in C: a
    comprehension would be a frame of its own, which the tracer's trace function is called for.)
    ``subclassed``: some override __torch_function__, which reading ``_version`` would call."""
    if subclassed:
        with torch._C.DisableTorchFunction():
            return versions_of(tensors)
    try:
        return list(map(_version, tensors))
    except RuntimeError:
        return [_version_or_none(tensor) for tensor in tensors]


def _version_or_none(tensor: torch.Tensor) -> int | None:
    try:
        return tensor._version
    except RuntimeError:
        return None


def moved(tensors: list[torch.Tensor], before: list[int | None],
          subclassed: Any = False) -> list[torch.Tensor]:
    """Those whose version moved since ``before`` (or, for an inference tensor, that inference mode
    may have written: it keeps no version)."""
    now = versions_of(tensors, subclassed)
    if now == before and None not in before:
        return []
    inference = torch.is_inference_mode_enabled()
    return [t for t, old, new in zip(tensors, before, now, strict=True)
            if (inference if old is None else old != new)]
