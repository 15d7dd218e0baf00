"""A dict's fingerprint read as its table's entries (``app.engine.pointers.dict_entries``) says what its
keys' and values' ids say, so the cached name walk sees every change a dict can go through without a
torch call: the walk, step after step, names what a fresh walk (no cache) names, and the incremental
snapshot equals the whole one. And the ids a run takes to fingerprint a dict that keeps what a loop
made grow with the loop, not with the loop times the dict (a kept ReLU graph a step in a dict)."""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable

import pytest
import torch

from app.engine import EngineLimits, fingerprints, names, trace_delta
from app.engine.fingerprints import ENTRIES_FROM, dict_count, fingerprint
from app.engine.ids import ObjectIds
from app.engine.members import key_text
from app.engine.pointers import POINTER, dict_entries
from tests.engine.test_engine_incremental import _assert_same

SIZE = ENTRIES_FROM + 6  # large enough to be read by its entries


def test_the_layout_holds_here_and_the_entries_are_the_ids() -> None:
    assert dict_entries is not None  # CPython 3.11, the interpreter the product runs on
    general = {i: torch.ones(1) for i in range(SIZE)}
    fields = [field for key, item in general.items() for field in (hash(key), id(key), id(item))]
    assert dict_entries(general, 100) == bytes((3 * POINTER,)) + struct.pack(f"{3 * SIZE}P", *fields)
    assert dict_entries(general, 2) == bytes((3 * POINTER,)) + struct.pack("6P", *fields[:6])
    text = {f"k{i}": torch.ones(1) for i in range(SIZE)}
    fields = [field for key, item in text.items() for field in (id(key), id(item))]
    assert dict_entries(text, 100) == bytes((2 * POINTER,)) + struct.pack(f"{2 * SIZE}P", *fields)
    assert dict_count(fingerprint(general, "dict")) == SIZE == dict_count(fingerprint(text, "dict"))
    del general[3]
    assert dict_entries(general, 100) is None  # a hole: read by ids
    assert dict_count(fingerprint(general, "dict")) == SIZE - 1


def test_a_split_table_is_read_by_ids() -> None:
    """An instance's ``__dict__`` keeps its values apart from its keys (shared by the class's
    instances): its entries are not its items, and the ids say what it holds."""

    class Plain:
        pass

    first, second = Plain(), Plain()
    for index in range(ENTRIES_FROM + 2):  # (CPython shares at most 30 keys)
        setattr(first, f"a{index}", torch.ones(1))
        setattr(second, f"a{index}", torch.ones(1))
    table = vars(second)
    assert dict_entries(table, 100) is None
    assert fingerprint(table, "dict") == (tuple(map(id, table)), tuple(map(id, table.values())))


class Hostile(dict):
    """A dict subclass whose overrides must never run while it is read."""

    def __len__(self) -> int:
        raise AssertionError("__len__ ran")

    def __iter__(self):  # type: ignore[override]
        raise AssertionError("__iter__ ran")

    def items(self):  # type: ignore[override]
        raise AssertionError("items ran")

    def keys(self):  # type: ignore[override]
        raise AssertionError("keys ran")

    def values(self):  # type: ignore[override]
        raise AssertionError("values ran")


def _grow(d: dict) -> None:
    dict.__setitem__(d, f"new{dict.__len__(d)}", torch.ones(1))


def _replace(d: dict) -> None:
    dict.__setitem__(d, next(iter(dict.keys(d))), torch.zeros(2))


def _delete_first(d: dict) -> None:
    dict.__delitem__(d, next(iter(dict.keys(d))))


def _readd_first(d: dict) -> None:
    key = next(iter(dict.keys(d)))
    dict.__setitem__(d, key, dict.pop(d, key))  # the same item, now last


def _int_key(d: dict) -> None:
    dict.__setitem__(d, 7, torch.ones(3))  # the table changes kind (str keys only, then any)


def _same_tensor_twice(d: dict) -> None:
    dict.__setitem__(d, "twice", next(iter(dict.values(d))))


def _many(d: dict) -> None:
    dict.update(d, {f"bulk{i}": torch.ones(1) for i in range(3 * SIZE)})  # a resize


def _shrink(d: dict) -> None:
    for key in list(dict.keys(d))[: dict.__len__(d) - 2]:
        dict.__delitem__(d, key)


def _regrow(d: dict) -> None:
    for index in range(SIZE):
        dict.__setitem__(d, f"again{index}", torch.ones(1))


CHANGES: list[Callable[[dict], None]] = [
    _grow, _grow, _replace, _delete_first, _grow, _readd_first, _int_key, _grow, _same_tensor_twice,
    _many, _grow, _shrink, _grow, _regrow, _grow, lambda d: dict.clear(d), _regrow,
]


@pytest.mark.parametrize("kind", [dict, collections.OrderedDict, Hostile])
def test_the_cached_walk_names_what_a_fresh_walk_names_after_every_dict_change(kind: type) -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    d = kind()
    for index in range(SIZE):
        dict.__setitem__(d, f"k{index}", torch.ones(1))
    namespace = {"d": d, "t": torch.ones(1)}
    walker.walk([("", namespace)])
    for change in CHANGES:
        change(d)
        walker.walk([("", namespace)])
        fresh = names.NameWalker(ids)
        fresh.walk([("", namespace)])
        assert walker.current == fresh.current, change
        expected = {f"d[{key_text(key)}]": ids.of(item) for key, item in dict.items(d)}
        assert {n: t for n, t in walker.current.items() if n.startswith("d[")} == expected


DICT_RUN = f"""\
a = torch.randn(4, requires_grad=True)
kept = {{}}
for i in range({SIZE}):
    kept[i] = (a * i).relu().sum()
kept[0] = a.sigmoid().sum()
del kept[1]
kept['x'] = a.exp()
kept[1] = kept.pop(2)
kept.update({{f'u{{j}}': a * j for j in range(3)}})
kept[3] = kept[4]
for j in range(5, 5 + {SIZE} // 2):
    del kept[j]
kept[100] = a.tanh()
kept.clear()
kept[0] = a.relu()
"""


def test_incremental_snapshots_equal_whole_ones_on_a_large_dict() -> None:
    result = _assert_same(DICT_RUN)
    assert result["ok"], result["error"]


def _ids_taken(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(ids taken by fingerprints, steps) of one run."""
    taken = 0
    ids = fingerprints._ids

    def counted(values):  # noqa: ANN001, ANN202
        nonlocal taken
        found = ids(values)
        taken += len(found)
        return found

    with monkeypatch.context() as patch:
        patch.setattr(fingerprints, "_ids", counted)
        result = trace_delta(source, EngineLimits())
    assert result["ok"] and not result["truncated"], result["error"]
    return taken, len(result["steps"])


@pytest.mark.parametrize("loop", ["for", "while"])
def test_a_dict_that_keeps_a_graph_a_step_is_not_fingerprinted_item_by_item(
        loop: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from app.bench.snippets import kept_graphs

    (small, small_steps), (large, large_steps) = (
        _ids_taken(kept_graphs("relu", n, "dict", loop), monkeypatch) for n in (50, 200))
    assert large_steps / small_steps > 3.4
    # by ids, each step took as many as the dict held: 16 times as many for 4 times the steps
    assert large / max(small, 1) < 1.5 * large_steps / small_steps, (small, large)


def test_a_dicts_version_tag_moves_at_every_change_and_only_then() -> None:
    from app.engine.pointers import dict_version

    assert dict_version is not None  # CPython 3.11
    d = {"a": torch.ones(1)}
    seen = [dict_version(d)]
    for change in (lambda: d.__setitem__("b", 1), lambda: d.pop("a"), lambda: d.update(c=2),
                   lambda: d.setdefault("e", 3), lambda: d.popitem(), lambda: d.clear()):
        before = dict_version(d)
        change()
        assert dict_version(d) != before
        seen.append(dict_version(d))
    d["x"] = value = torch.ones(1)
    before = dict_version(d)
    d["x"] = value  # the same object again: nothing changed
    assert dict_version(d) == before
    assert len(set(seen)) == len(seen)
    assert dict_version({}) not in seen  # a new dict, whatever its address, has a tag of its own

    class Plain:
        pass

    first, second = Plain(), Plain()
    first.a = second.a = 1
    assert dict_version(vars(second)) is None  # a split table: its values are written beside it
