"""A list's fingerprint read as its item addresses (``app.engine.pointers``) says what its ids say,
so the cached name walk sees every change a list can go through without a torch call: the walk,
step after step, names what a fresh walk (no cache) names."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
import torch

from app.engine import fingerprints, names
from app.engine.ids import ObjectIds
from app.engine.pointers import POINTER, list_pointers


def test_the_layout_holds_here_and_the_addresses_are_the_ids() -> None:
    assert list_pointers is not None  # CPython 3.11, the interpreter the product runs on
    items = [torch.ones(1), object(), "text", None]
    assert list_pointers(items, 100) == struct.pack(f"{len(items)}P", *map(id, items))
    assert list_pointers(items, 2) == struct.pack("2P", *map(id, items[:2]))
    assert list_pointers([], 100) == b""
    assert len(list_pointers(items, 100)) == 4 * POINTER
    counted = fingerprints.item_count
    assert counted(list_pointers(items, 100)) == 4 == counted(tuple(map(id, items)))


class Hostile(list):
    """A list subclass whose overrides must never run while it is read."""

    def __len__(self) -> int:
        raise AssertionError("__len__ ran")

    def __iter__(self):  # type: ignore[override]
        raise AssertionError("__iter__ ran")


# The changes below use the built-in methods (a Hostile's own __len__ and __iter__ are never called).
def _swap(xs: list) -> None:
    xs[0], xs[-1] = xs[-1], xs[0]


def _replace_middle(xs: list) -> None:
    xs[list.__len__(xs) // 2] = torch.zeros(2)


def _same_length_new_items(xs: list) -> None:
    xs[:] = [torch.full((1,), float(i)) for i in range(list.__len__(xs))]


CHANGES: list[Callable[[list], None]] = [
    lambda xs: xs.append(torch.ones(1)),
    lambda xs: xs.extend([torch.ones(2), torch.ones(3)]),
    _replace_middle,
    _swap,
    lambda xs: xs.reverse(),
    lambda xs: xs.insert(0, torch.ones(4)),
    lambda xs: xs.pop(),
    lambda xs: xs.pop(0),
    _same_length_new_items,
    lambda xs: xs.append(xs[0]),  # the same tensor twice
    lambda xs: xs.clear(),
    lambda xs: xs.append(torch.ones(5)),
]


@pytest.mark.parametrize("kind", [list, Hostile])
def test_the_cached_walk_names_what_a_fresh_walk_names_after_every_list_change(kind: type) -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    xs = kind([torch.ones(1), torch.ones(1), torch.ones(1)])
    namespace = {"xs": xs, "t": torch.ones(1)}
    walker.walk([("", namespace)])
    for change in CHANGES:
        change(xs)
        walker.walk([("", namespace)])
        fresh = names.NameWalker(ids)
        fresh.walk([("", namespace)])
        assert walker.current == fresh.current, change
        expected = {f"xs[{i}]": ids.of(item) for i, item in enumerate(list.__iter__(xs))}
        assert {n: t for n, t in walker.current.items() if n.startswith("xs")} == expected
