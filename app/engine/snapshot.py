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

from app.engine.ids import NodeIds, ObjectIds
from app.engine.values import storage_values, tensor_summary, tensor_values

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


def _is_user_instance(value: Any) -> bool:
    """An instance of a class the snippet defined (its attributes are user data)."""
    cls = type(value)
    return getattr(cls, "__module__", None) == "__main__" and hasattr(value, "__dict__")


def _user_value(name: str, value: Any) -> bool:
    if name.startswith("__") or isinstance(value, types.ModuleType | types.FunctionType | type):
        return False
    return not isinstance(value, types.BuiltinFunctionType | types.MethodType)


def _saved_names(node: Any, cache: dict[type, tuple[str, ...]]) -> tuple[str, ...]:
    kind = type(node)
    names = cache.get(kind)
    if names is None:
        names = cache[kind] = tuple(a for a in dir(node) if a.startswith(SAVED_PREFIX))
    return names


class SnapshotTaker:
    """Holds the id registries of one run; ``take`` builds one step."""

    def __init__(self) -> None:
        self.tensor_ids = ObjectIds("t")
        self.storage_ids = ObjectIds("s")
        self.node_ids = NodeIds()
        self._saved_cache: dict[type, tuple[str, ...]] = {}

    def take(self, line: int, stdout: str, scopes: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """``scopes`` lists (prefix, namespace) pairs: the module first, then active function frames."""
        variables: dict[str, str] = {}
        tensors: dict[str, dict[str, Any]] = {}
        storages: dict[str, dict[str, Any]] = {}
        nodes: dict[str, dict[str, Any]] = {}
        tensor_queue: deque[tuple[str, torch.Tensor]] = deque()
        node_queue: deque[tuple[str, Any]] = deque()
        # Saved outputs come back as a new Python tensor on each access; they are matched to the
        # live tensor they alias once every other tensor is known.
        deferred_saved: list[tuple[dict[str, Any], str, str, torch.Tensor]] = []

        def tensor_id(tensor: torch.Tensor) -> str:
            tid = self.tensor_ids.of(tensor)
            if tid not in tensors and len(tensors) < MAX_TENSORS:
                tensors[tid] = {}  # placeholder: filled when dequeued
                tensor_queue.append((tid, tensor))
            return tid

        def node_id(node: Any) -> str:
            nid = self.node_ids.of(node)
            if nid not in nodes and len(nodes) < MAX_NODES:
                nodes[nid] = {}
                node_queue.append((nid, node))
            return nid

        for prefix, namespace in scopes:
            for name, value in list(namespace.items()):
                if (not prefix and name in PRELUDE_NAMES) or not _user_value(name, value):
                    continue
                for label, tensor in named_tensors(prefix + name, value):
                    variables[label] = tensor_id(tensor)

        while tensor_queue or node_queue:
            while tensor_queue:
                tid, tensor = tensor_queue.popleft()
                tensors[tid] = self._tensor_fact(tensor, tensor_id, node_id, storages)
            while node_queue:
                nid, node = node_queue.popleft()
                nodes[nid] = self._node_fact(nid, node, tensor_id, node_id, deferred_saved)

        for fact, name, nid, tensor in deferred_saved:
            fact["saved"][name] = self._match_saved(tensor, nid, name, tensors, tensor_id)
            while tensor_queue:  # a saved tensor nobody else names: describe it too
                tid, queued = tensor_queue.popleft()
                tensors[tid] = self._tensor_fact(queued, tensor_id, node_id, storages)

        return {
            "line": line,
            "stdout": stdout,
            "variables": variables,
            "tensors": tensors,
            "storages": storages,
            "nodes": nodes,
        }

    def _tensor_fact(self, t: torch.Tensor, tensor_id: Any, node_id: Any, storages: dict[str, Any]) -> dict:
        storage_id = self._storage(t, storages)
        is_inference = t.is_inference()
        try:
            version: int | None = t._version
        except RuntimeError:  # inference tensors keep no version counter
            version = None
        grad_fn = t.grad_fn
        # .grad is only meaningful (and warning-free) on leaves and on tensors that retain grad.
        grad = t.grad if (t.is_leaf or t.retains_grad) else None
        base = t._base
        return {
            "shape": list(t.shape),
            "dtype": str(t.dtype).removeprefix("torch."),
            "stride": list(t.stride()) if t.layout == torch.strided else [],
            "storage_offset": t.storage_offset() if t.layout == torch.strided else 0,
            "storage": storage_id,
            "requires_grad": t.requires_grad,
            "is_leaf": t.is_leaf,
            "grad_fn": node_id(grad_fn) if grad_fn is not None else None,
            "grad": tensor_id(grad) if grad is not None else None,
            "base": tensor_id(base) if base is not None else None,
            "version": version,
            "values": tensor_values(t),
            "summary": tensor_summary(t),
            "is_view": t._is_view(),
            "retains_grad": t.retains_grad,
            "is_inference": is_inference,
            "device": str(t.device),
        }

    def _storage(self, t: torch.Tensor, storages: dict[str, Any]) -> str | None:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):  # sparse and other storage-less layouts
            return None
        sid = self.storage_ids.of(storage)
        if sid not in storages:
            nbytes = storage.nbytes()
            storages[sid] = {
                "nbytes": nbytes,
                "element_size": t.element_size(),
                "dtype": str(t.dtype).removeprefix("torch."),
                "values": storage_values(t, nbytes),
            }
        return sid

    def _node_fact(self, nid: str, node: Any, tensor_id: Any, node_id: Any, deferred: list) -> dict:
        fact: dict[str, Any] = {
            "name": node.name(),
            "next": [node_id(fn) if fn is not None else None for fn, _ in node.next_functions],
            "variable": None,
            "saved": {},
            "saved_errors": {},
        }
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            fact["variable"] = tensor_id(variable)
        for attribute in _saved_names(node, self._saved_cache):
            name = attribute.removeprefix(SAVED_PREFIX)
            try:
                value = getattr(node, attribute)
            except RuntimeError as error:  # freed by backward, or modified in place since it was saved
                fact["saved"][name] = None
                fact["saved_errors"][name] = str(error).split("\n")[0][:1000]
                continue
            if isinstance(value, torch.Tensor):
                if self.tensor_ids.known(value) is not None:
                    fact["saved"][name] = tensor_id(value)
                else:
                    fact["saved"][name] = None
                    deferred.append((fact, name, nid, value))
        return fact

    def _match_saved(self, t: torch.Tensor, nid: str, name: str, tensors: dict, tensor_id: Any) -> str:
        """The live tensor this unpacked copy stands for, else a stable per-(node, name) id."""
        signature = _signature(t)
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError, TypeError):
            storage = None
        storage_id = self.storage_ids.known(storage) if storage is not None else None
        if storage_id is not None:
            twins = [
                tid
                for tid, fact in tensors.items()
                if fact
                and fact["storage"] == storage_id
                and (fact["shape"], fact["stride"], fact["storage_offset"], fact["dtype"]) == signature
            ]
            # A saved output is the tensor that node produced: prefer the twin whose grad_fn it is.
            own = [tid for tid in twins if tensors[tid]["grad_fn"] == nid]
            if own or twins:
                return (own or twins)[0]
        tid = self.tensor_ids.keyed((nid, name))
        # Register the fresh object under the keyed id so that tensor_id() describes it.
        self.tensor_ids.alias(t, tid)
        return tensor_id(t)


def _signature(t: torch.Tensor) -> tuple:
    return (list(t.shape), list(t.stride()), t.storage_offset(), str(t.dtype).removeprefix("torch."))
