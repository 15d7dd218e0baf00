"""Small, stable ids for live tensors, storages and graph nodes, without keeping them alive.

The explorer must not change what the snippet does, so it holds no strong reference to user objects
between steps. Tensors and storages are weakly referenced; graph nodes cannot be (torch refuses weak
references to them), so a node carries its id in ``node.metadata``, a dict that lives exactly as long
as the node does.
"""

from __future__ import annotations

import weakref
from collections.abc import Hashable
from typing import Any

NODE_ID_KEY = "autograd_explorer_id"


class ObjectIds:
    """Maps live, weak-referenceable objects to ids like ``t1``; an id is never reused."""

    def __init__(self, prefix: str) -> None:
        self._prefix = prefix
        self._count = 0
        self._by_address: dict[int, tuple[weakref.ref[Any], str]] = {}
        self._by_key: dict[Hashable, str] = {}

    def _new(self) -> str:
        self._count += 1
        return f"{self._prefix}{self._count}"

    def of(self, obj: Any) -> str:
        address = id(obj)
        entry = self._by_address.get(address)
        if entry is not None and entry[0]() is obj:
            return entry[1]
        new_id = self._new()
        # The callback forgets the address once the object dies, so a later object at the same
        # address gets a fresh id instead of inheriting this one.
        self._remember(obj, new_id)
        return new_id

    def _forget(self, address: int, ref: weakref.ref[Any]) -> None:
        entry = self._by_address.get(address)
        if entry is not None and entry[0] is ref:
            del self._by_address[address]

    def known(self, obj: Any) -> str | None:
        entry = self._by_address.get(id(obj))
        if entry is not None and entry[0]() is obj:
            return entry[1]
        return None

    def alias(self, obj: Any, existing_id: str) -> None:
        """Make a fresh object answer to an id handed out earlier (see ``keyed``)."""
        self._remember(obj, existing_id)

    def _remember(self, obj: Any, object_id: str) -> None:
        address = id(obj)
        self._by_address[address] = (weakref.ref(obj, lambda ref: self._forget(address, ref)), object_id)

    def keyed(self, key: Hashable) -> str:
        """An id for something torch re-creates on every access (a saved output tensor)."""
        found = self._by_key.get(key)
        if found is None:
            found = self._by_key[key] = self._new()
        return found


class NodeIds:
    """Ids for autograd graph nodes, stored in the node's own ``metadata`` dict."""

    def __init__(self) -> None:
        self._count = 0

    def of(self, node: Any) -> str:
        metadata = node.metadata
        found = metadata.get(NODE_ID_KEY)
        if found is None:
            self._count += 1
            found = metadata[NODE_ID_KEY] = f"n{self._count}"
        return found
