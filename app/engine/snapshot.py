"""One snapshot: every tensor the user can reach, its storage and its autograd graph, as plain data.

Called after each executed line. It holds user objects only while it runs; what it returns is
strings and numbers (the shape of ``app.schema.Step``).
"""

from __future__ import annotations

import types
from collections import deque
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.autograd.function import BackwardCFunction

from app.engine.ids import NodeIds, ObjectIds
from app.engine.values import MAX_VALUES, ValueWriter, nest

SAVED_PREFIX = "_saved_"
MAX_CONTAINER_ITEMS = 256
MAX_CONTAINER_DEPTH = 3
MAX_TENSORS = 2000
MAX_NODES = 2000

# Names the engine binds for the snippet; they are modules, not user data.
PRELUDE_NAMES = frozenset({"torch", "nn", "F", "math", "__builtins__", "__name__"})


def named_tensors(name: str, value: Any, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors reachable from one user-visible name: itself, container items, module parameters."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif isinstance(value, nn.Module):
        for sub, tensor in value.named_parameters(recurse=True):
            yield f"{name}.{sub}", tensor
        for sub, tensor in value.named_buffers(recurse=True):
            yield f"{name}.{sub}", tensor
        if depth < MAX_CONTAINER_DEPTH:
            yield from _plain_module_attributes(name, value, depth)
    elif depth >= MAX_CONTAINER_DEPTH:
        return
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value[:MAX_CONTAINER_ITEMS]):
            yield from named_tensors(f"{name}[{index}]", item, depth + 1)
    elif isinstance(value, dict):
        for index, (key, item) in enumerate(value.items()):
            if index >= MAX_CONTAINER_ITEMS:
                break
            yield from named_tensors(f"{name}[{key!r}]", item, depth + 1)
    elif _is_user_instance(value):
        for attribute, item in list(vars(value).items())[:MAX_CONTAINER_ITEMS]:
            yield from named_tensors(f"{name}.{attribute}", item, depth + 1)


def _plain_module_attributes(name: str, module: nn.Module, depth: int) -> Iterator[tuple[str, torch.Tensor]]:
    """Tensors a module keeps as plain attributes (``self.scale = torch.tensor(2.0)``): neither
    parameters nor buffers, but as reachable, and as able to keep a graph alive."""
    for sub, child in module.named_modules():
        prefix = f"{name}.{sub}." if sub else f"{name}."
        for attribute, item in list(vars(child).items())[:MAX_CONTAINER_ITEMS]:
            if not attribute.startswith("_") and isinstance(item, torch.Tensor | list | tuple | dict):
                yield from named_tensors(prefix + attribute, item, depth + 1)


def _is_user_instance(value: Any) -> bool:
    """An instance of a class the snippet defined (its attributes are user data)."""
    cls = type(value)
    return getattr(cls, "__module__", None) == "__main__" and hasattr(value, "__dict__")


def _user_value(name: str, value: Any) -> bool:
    if name.startswith("__") or isinstance(value, types.ModuleType | types.FunctionType | type):
        return False
    return not isinstance(value, types.BuiltinFunctionType | types.MethodType)


def _short_message(error: BaseException) -> str:
    """torch's message up to its first full stop: the fact, without the hint that follows."""
    text = str(error).split("\n")[0]
    head, stop, _ = text.partition(". ")
    return (head + "." if stop else text)[:1000]


# Accessing a saved tensor after backward released it raises this, and always will again.
FREED_PREFIX = "Trying to backward through the graph a second time"


def _saved_names(node: Any, cache: dict[type, tuple[str, ...]]) -> tuple[str, ...]:
    """The attributes of a node that unpack saved tensors: ``_saved_*`` for torch's own nodes,
    ``saved_tensors`` for a snippet's ``autograd.Function`` (what ``ctx.save_for_backward`` kept)."""
    kind = type(node)
    names = cache.get(kind)
    if names is None:
        found = [a for a in dir(node) if a.startswith(SAVED_PREFIX)]
        if isinstance(node, BackwardCFunction):
            found.append("saved_tensors")
        names = cache[kind] = tuple(found)
    return names


def _packed_by_hooks(node: Any, attribute: str) -> Any:
    """What ``saved_tensors_hooks`` packed for this saved value, or None when no hook is involved."""
    raw_name = "_raw" + attribute if attribute.startswith(SAVED_PREFIX) else "_raw_" + attribute
    try:
        raw = getattr(node, raw_name, None)
    except RuntimeError:  # freed by backward: the plain read reports it
        return None
    several = isinstance(raw, list | tuple)
    items = raw if several else (raw,)
    if not any(getattr(item, "unpack_hook", None) is not None for item in items):
        return None
    return [item.data for item in items] if several else raw.data


class SnapshotTaker:
    """Holds the id registries of one run; ``take`` builds one step."""

    def __init__(self) -> None:
        self.tensor_ids = ObjectIds("t")
        self.storage_ids = ObjectIds("s")
        self.node_ids = NodeIds()
        self.values = ValueWriter()
        self.saved_names: dict[type, tuple[str, ...]] = {}
        self.has_variable: dict[type, bool] = {}  # AccumulateGrad-like node types
        # node id -> saved name -> message, for buffers backward released: reading them again would
        # only raise again (node ids are never reused, so an entry never goes stale).
        self.freed: dict[str, dict[str, str]] = {}

    def take(self, line: int, stdout: str, scopes: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """``scopes`` lists (prefix, namespace) pairs: the module first, then active function frames."""
        # Reading facts must not run a snippet-defined tensor subclass's __torch_function__.
        with torch._C.DisableTorchFunctionSubclass():
            builder = _StepBuilder(self)
            variables = builder.add_scopes(scopes)
            builder.drain()
        return {
            "line": line,
            "stdout": stdout,
            "variables": variables,
            "tensors": builder.tensors,
            "storages": builder.storages,
            "nodes": builder.nodes,
        }


class _StepBuilder:
    """Builds one step. It holds user objects, so it lives only while ``SnapshotTaker.take`` runs."""

    def __init__(self, run: SnapshotTaker) -> None:
        self.run = run
        self.tensors: dict[str, dict[str, Any]] = {}
        self.storages: dict[str, dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self._tensor_queue: deque[tuple[str, torch.Tensor]] = deque()
        self._node_queue: deque[tuple[str, Any]] = deque()
        # Saved outputs come back as a new Python tensor on each access; they are matched to the
        # live tensor they alias once every other tensor is known.
        self._deferred: list[tuple[dict[str, Any], str, str, torch.Tensor]] = []
        self._by_storage: dict[str, list[str]] = {}  # storage id -> ids of tensors on it
        # storage id -> (dtype it was read as, its converted elements): a contiguous tensor's values
        # are a slice of these, which spares reading and converting the same numbers twice.
        self._storage_reads: dict[str, tuple[torch.dtype, list[Any]]] = {}

    def add_scopes(self, scopes: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
        variables: dict[str, str] = {}
        for prefix, namespace in scopes:
            for name, value in list(namespace.items()):
                if (not prefix and name in PRELUDE_NAMES) or not _user_value(name, value):
                    continue
                for label, tensor in named_tensors(prefix + name, value):
                    tid = self.tensor_id(tensor)
                    if tid in self.tensors:  # past MAX_TENSORS a name would point at nothing
                        variables[label] = tid
        return variables

    def tensor_id(self, tensor: torch.Tensor) -> str:
        tid = self.run.tensor_ids.of(tensor)
        if tid not in self.tensors and len(self.tensors) < MAX_TENSORS:
            self.tensors[tid] = {}  # placeholder: filled when dequeued
            self._tensor_queue.append((tid, tensor))
        return tid

    def node_id(self, node: Any) -> str:
        nid = self.run.node_ids.of(node)
        if nid not in self.nodes and len(self.nodes) < MAX_NODES:
            self.nodes[nid] = {}
            self._node_queue.append((nid, node))
        return nid

    def drain(self) -> None:
        """Describe everything queued, then match saved outputs; repeat while that finds more."""
        while True:
            while self._tensor_queue or self._node_queue:
                while self._tensor_queue:
                    tid, tensor = self._tensor_queue.popleft()
                    self.tensors[tid] = self._tensor_fact(tid, tensor)
                while self._node_queue:
                    nid, node = self._node_queue.popleft()
                    self.nodes[nid] = self._node_fact(nid, node)
            if not self._deferred:
                return
            pending, self._deferred = self._deferred, []
            for fact, name, nid, tensor in pending:
                fact["saved"][name] = self._match_saved(tensor, nid, name)

    def _tensor_fact(self, tid: str, t: torch.Tensor) -> dict[str, Any]:
        strided = t.layout == torch.strided
        storage_id = self._storage(t)
        if storage_id is not None:
            self._by_storage.setdefault(storage_id, []).append(tid)
        try:
            version: int | None = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = None
        grad_fn = t.grad_fn
        is_leaf = t.is_leaf
        retains_grad = t.retains_grad
        # .grad is only meaningful (and warning-free) on leaves and on tensors that retain grad.
        grad = t.grad if (is_leaf or retains_grad) else None
        base = t._base
        values = self.run.values
        return {
            "shape": list(t.shape),
            "dtype": str(t.dtype).removeprefix("torch."),
            "stride": list(t.stride()) if strided else [],
            "storage_offset": t.storage_offset() if strided else 0,
            "storage": storage_id,
            "requires_grad": t.requires_grad,
            "is_leaf": is_leaf,
            "grad_fn": self.node_id(grad_fn) if grad_fn is not None else None,
            "grad": self.tensor_id(grad) if grad is not None else None,
            "base": self.tensor_id(base) if base is not None else None,
            "version": version,
            "values": self._values(t, storage_id),
            "summary": values.summary(t),
            "is_view": t._is_view(),
            "retains_grad": retains_grad,
            "is_inference": t.is_inference(),
            "device": str(t.device),
        }

    def _values(self, t: torch.Tensor, storage_id: str | None) -> Any:
        read = self._storage_reads.get(storage_id) if storage_id is not None else None
        if read is not None and read[0] == t.dtype and t.is_contiguous() and not _has_lazy_bits(t):
            numel = t.numel()
            if 0 < numel <= MAX_VALUES:
                offset = t.storage_offset()
                flat = read[1][offset : offset + numel]
                if len(flat) == numel:
                    return nest(flat, list(t.shape))
        return self.run.values.tensor_values(t)

    def _storage(self, t: torch.Tensor) -> str | None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse and other storage-less layouts
            return None
        sid = self.run.storage_ids.of(storage)
        if sid not in self.storages:
            nbytes = storage.nbytes()
            elements = self.run.values.storage_values(t, nbytes)
            if elements is not None and not _has_lazy_bits(t):
                self._storage_reads[sid] = (t.dtype, elements)
            self.storages[sid] = {
                "nbytes": nbytes,
                "element_size": t.element_size(),
                "dtype": str(t.dtype).removeprefix("torch."),
                "values": elements,
            }
        return sid

    def _node_fact(self, nid: str, node: Any) -> dict[str, Any]:
        fact: dict[str, Any] = {
            "name": type(node).__name__,  # what print(grad_fn) shows: AccumulateGrad, not torch::autograd::…
            "next": [self.node_id(fn) if fn is not None else None for fn, _ in node.next_functions],
            "variable": None,
            "saved": {},
            "saved_errors": {},
        }
        kind = type(node)
        has_variable = self.run.has_variable.get(kind)
        if has_variable is None:
            has_variable = self.run.has_variable[kind] = hasattr(node, "variable")
        if has_variable:
            variable = node.variable
            if isinstance(variable, torch.Tensor):
                fact["variable"] = self.tensor_id(variable)
        for attribute in _saved_names(node, self.run.saved_names):
            self._read_saved(fact, nid, node, attribute)
        return fact

    def _read_saved(self, fact: dict[str, Any], nid: str, node: Any, attribute: str) -> None:
        name = attribute.removeprefix(SAVED_PREFIX)
        freed = self.run.freed.get(nid)
        if freed is not None and name in freed:
            fact["saved"][name] = None
            fact["saved_errors"][name] = freed[name]
            return
        packed = _packed_by_hooks(node, attribute)
        if packed is not None:
            # Unpacking would call the snippet's own unpack hook (and print, count...): show what the
            # graph actually holds, the packed value, instead.
            if isinstance(packed, torch.Tensor | list | tuple):
                self._add_saved(fact, nid, name, packed)
            else:
                fact["saved"][name] = None
                fact["saved_errors"][name] = (
                    f"Packed as a {type(packed).__name__} by a saved_tensors_hooks pack function."
                )
            return
        try:
            value = getattr(node, attribute)
        except RuntimeError as error:  # freed by backward, or modified in place since it was saved
            message = _short_message(error)
            fact["saved"][name] = None
            fact["saved_errors"][name] = message
            if message.startswith(FREED_PREFIX):
                self.run.freed.setdefault(nid, {})[name] = message
            return
        self._add_saved(fact, nid, name, value)

    def _add_saved(self, fact: dict[str, Any], nid: str, name: str, value: Any) -> None:
        if isinstance(value, torch.Tensor):
            self._saved(fact, nid, name, value)
        elif isinstance(value, list | tuple):  # e.g. IndexBackward0's indices, ctx.saved_tensors
            for index, item in enumerate(value[:MAX_CONTAINER_ITEMS]):
                if isinstance(item, torch.Tensor):
                    self._saved(fact, nid, f"{name}[{index}]", item)

    def _saved(self, fact: dict[str, Any], nid: str, name: str, value: torch.Tensor) -> None:
        if self.run.tensor_ids.known(value) is not None:
            fact["saved"][name] = self.tensor_id(value)
        else:
            fact["saved"][name] = None
            self._deferred.append((fact, name, nid, value))

    def _match_saved(self, t: torch.Tensor, nid: str, name: str) -> str:
        """The live tensor this unpacked copy stands for, else a stable per-(node, name) id."""
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            storage = None
        storage_id = self.run.storage_ids.known(storage) if storage is not None else None
        if storage_id is not None:
            signature = _signature(t)
            twins = [
                tid
                for tid in self._by_storage.get(storage_id, ())
                if (fact := self.tensors[tid])
                and (fact["shape"], fact["stride"], fact["storage_offset"], fact["dtype"]) == signature
            ]
            # A saved output is the tensor that node produced: prefer the twin whose grad_fn it is.
            own = [tid for tid in twins if self.tensors[tid]["grad_fn"] == nid]
            if own or twins:
                return (own or twins)[0]
        tid = self.run.tensor_ids.keyed((nid, name))
        # Register the fresh object under the keyed id so that tensor_id() describes it.
        self.run.tensor_ids.alias(t, tid)
        return self.tensor_id(t)


def _has_lazy_bits(t: torch.Tensor) -> bool:
    """Conjugate and negative views read differently from the raw storage they share."""
    return t.is_conj() or t.is_neg()


def _signature(t: torch.Tensor) -> tuple:
    return (list(t.shape), list(t.stride()), t.storage_offset(), str(t.dtype).removeprefix("torch."))
