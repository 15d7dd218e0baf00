"""Graphs kept in a set, a deque, a tuple rebuilt at each iteration (``t = t + (out,)``) and a list of
dicts: the fingerprints that say, at every step, whether such a container changed are read in one
copy (``fingerprints._identities``; a list of dicts' version tags gathered at once,
``pointers.dict_versions``) — the cached walk names after every change what a fresh walk names, the
incremental snapshot equals the whole one, and torch agrees with every step."""

from __future__ import annotations

import collections
import struct
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch_oracle import assert_steps_match_plain, run_plain, trace

from app.bench.snippets import kept_graphs
from app.engine import fingerprints, names, pointers
from app.engine.ids import ObjectIds
from app.engine.pointers import dict_version, dict_versions
from tests.engine.test_engine_held_tuples import _members_read
from tests.engine.test_engine_incremental import _assert_same


def test_the_gathered_version_tags_are_the_tags_one_by_one() -> None:
    assert dict_versions is not None and dict_version is not None  # CPython 3.11, as the product runs
    dicts: list[Any] = [{}, {"loss": torch.ones(1)}, {1: 2, (3, 4): None}, {"a": 1}]
    dicts[3]["b"] = 2  # a change moves the tag
    everything = bytes([1] * len(dicts))
    assert dict_versions(dicts, everything) == struct.pack("4Q", *map(dict_version, dicts))
    assert dict_versions(dicts, bytes([0, 1, 0, 1])) == struct.pack("2Q", *map(dict_version, dicts[1::2]))
    assert dict_versions([], b"") == b"" == dict_versions(dicts, bytes(4))
    # what is marked and is no dict has no tag (0); only a dict's is read
    others: list[Any] = [(1, 2), "text", torch.ones(1), object(), dicts[0]]
    assert dict_versions(others, bytes([1] * 5)) == struct.pack("5Q", 0, 0, 0, 0, dict_version(dicts[0]))
    before = dict_versions(dicts, everything)
    dicts[1]["loss"] = torch.zeros(1)
    after = dict_versions(dicts, everything)
    assert before[8:16] != after[8:16] and before[:8] + before[16:] == after[:8] + after[16:]
    assert pointers._one_by_one(others, bytes([1] * 5)) == dict_versions(others, bytes([1] * 5))


def test_what_tuples_of_one_length_hold_is_gathered_as_their_ids() -> None:
    assert pointers.tuples_held is not None  # CPython 3.11, as the product runs
    pairs: list[Any] = [(torch.ones(1), i) for i in range(5)]
    marked = bytes([1] * 5)
    assert pointers.tuples_held(pairs, marked) == struct.pack("10P", *(id(x) for pair in pairs for x in pair))
    assert pointers.tuples_held(pairs, bytes([0, 1, 0, 0, 1])) == struct.pack(
        "4P", *(id(x) for pair in (pairs[1], pairs[4]) for x in pair))
    # tuples of several lengths, or something else marked: not gathered (the caller chains them)
    assert pointers.tuples_held([*pairs, (torch.ones(1),)], bytes([1] * 6)) is None
    assert pointers.tuples_held([*pairs, [torch.ones(1), 1]], bytes([1] * 6)) is None
    assert pointers.tuples_held(pairs, bytes(5)) == b"" == pointers.tuples_held([(), ()], bytes([1, 1]))
    # the walk's check (fingerprints.held_ids) says the same whichever way it was read
    fixed = bytes([fingerprints.TUPLE] * 5)
    assert fingerprints.held_ids(pairs, "sequence", fixed) == fingerprints.held_of(
        [(str(i), pair) for i, pair in enumerate(pairs)], fixed)


@pytest.mark.parametrize("value", [(torch.ones(1), 2, "x"), collections.deque([torch.ones(1), 3]),
                                   {torch.ones(1), 4, "y"}])
def test_a_fingerprint_read_in_one_copy_is_the_ids(value: Any) -> None:
    kind = "set" if isinstance(value, set) else "sequence"
    found = fingerprints.fingerprint(value, kind)
    assert found == struct.pack(f"{len(value)}P", *map(id, value))
    assert fingerprints.item_count(found) == len(value)


def _by_set(current: dict[str, str]) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(the names that are no set member's, per set: member tensor id -> its name)."""
    plain: dict[str, str] = {}
    sets: dict[str, dict[str, str]] = {}
    for name, tid in current.items():
        if "{" in name:
            sets.setdefault(name[: name.index("{")], {})[tid] = name
        else:
            plain[name] = tid
    return plain, sets


def _check(walker: names.NameWalker, ids: ObjectIds, namespace: dict[str, Any], change: object,
           labels: dict[str, dict[str, str]] | None = None) -> dict[str, dict[str, str]]:
    """The cached walk names what a fresh walk names; a set's members (labelled by their history,
    which a fresh walk does not have: ``app.engine.labels``) are the same tensors, and each one
    still in the set since ``labels`` (the last check's) has its label, a new one a label never
    given under that name before."""
    walker.walk([("", namespace)])
    fresh = names.NameWalker(ids)
    fresh.walk([("", namespace)])
    (plain, sets), (fresh_plain, fresh_sets) = _by_set(walker.current), _by_set(fresh.current)
    assert plain == fresh_plain, change
    assert {k: set(v) for k, v in sets.items()} == {k: set(v) for k, v in fresh_sets.items()}, change
    for container, members in sets.items():
        before = (labels or {}).get(container, {})
        for tid, name in members.items():
            if tid in before:
                assert name == before[tid], (change, tid)
            else:
                assert name not in before.values(), (change, name)
        assert len(set(members.values())) == len(members), change
    return sets


def _rebuilt(namespace: dict[str, Any]) -> None:
    namespace["t"] = namespace["t"] + (torch.ones(1),)


CHANGES: list[Callable[[dict[str, Any]], None]] = [
    lambda ns: ns["dq"].append(torch.ones(1)),
    lambda ns: ns["dq"].appendleft(torch.ones(2)),
    lambda ns: ns["dq"].rotate(1),
    lambda ns: ns["dq"].popleft(),
    lambda ns: ns["s"].add(torch.ones(1)),
    lambda ns: ns["s"].update({torch.ones(2), torch.ones(3)}),
    lambda ns: ns["s"].pop(),
    _rebuilt,
    _rebuilt,
    lambda ns: ns.__setitem__("t", ns["t"][1:]),
    lambda ns: ns.__setitem__("t", (*ns["t"], ns["t"][0])),  # the same tensor twice
    lambda ns: ns["dicts"].append({"loss": torch.ones(1), "step": 1}),
    lambda ns: ns["dicts"][0].__setitem__("loss", torch.ones(2)),  # a member changed in place
    lambda ns: ns["dicts"].append(ns["dicts"][0]),  # the same dict twice
    lambda ns: ns["dicts"][-1].pop("loss"),
    lambda ns: ns["dicts"].append((torch.ones(1), 0)),  # a tuple among them
    lambda ns: ns["dicts"][1].update(more=torch.ones(3)),
    lambda ns: ns["dq"].clear(),
    lambda ns: ns["s"].clear(),
    # a rebuilt tuple's entry moves to the new tuple (``names.NameWalker._moved``): other kinds bound
    # to the same name, a head replaced, nested tuples
    lambda ns: ns.__setitem__("t", list(ns["t"]) + [torch.ones(1)]),
    lambda ns: ns.__setitem__("t", tuple(ns["t"])),
    lambda ns: ns.__setitem__("t", set(ns["t"])),
    lambda ns: ns.__setitem__("t", (*ns["t"], torch.ones(2))),
    lambda ns: ns.__setitem__("t", (torch.zeros(1), *ns["t"][1:])),
    lambda ns: ns.__setitem__("t", ns["t"] + ((torch.ones(1), 1),)),
    lambda ns: ns.__setitem__("t", ns["t"] + ((torch.ones(1), 2),)),
    lambda ns: ns.__setitem__("t", {"k": ns["t"]}),
    lambda ns: ns.__setitem__("t", (torch.ones(1),)),
    lambda ns: ns.__setitem__("t", collections.deque(ns["t"]) + collections.deque([torch.ones(1)])),
    lambda ns: ns.__setitem__("t", ()),
    _rebuilt,
]


def test_the_cached_walk_names_what_a_fresh_walk_names_after_every_change() -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    namespace: dict[str, Any] = {
        "dq": collections.deque([torch.ones(1)]), "s": {torch.ones(1)}, "t": (torch.ones(1),),
        "dicts": [{"loss": torch.ones(1)}, {"loss": torch.ones(1), "step": 0}],
    }
    walker.walk([("", namespace)])
    labels = _by_set(walker.current)[1]
    for change in CHANGES:
        change(namespace)
        labels = _check(walker, ids, namespace, change, labels)
        labels = _check(walker, ids, namespace, change, labels)  # and unchanged, the step after


def test_a_tuple_built_from_a_set_is_named_as_a_tuple() -> None:
    """The set last read under ``t`` holds the new tuple's first items, in its order: its entry (names
    ``t{i}``) is not the tuple's to grow from."""
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    namespace: dict[str, Any] = {"t": (torch.ones(1), torch.ones(2))}
    for change in [lambda: set(namespace["t"]), lambda: (*namespace["t"], torch.ones(3)),
                   lambda: list(namespace["t"]), lambda: (*namespace["t"], torch.ones(4))]:
        namespace["t"] = change()
        _check(walker, ids, namespace, change)


def test_two_frames_rebuilding_a_tuple_of_one_name() -> None:
    """A recursive function's frames hold a tuple each under one name (``f:t``): the entry moves
    from one to the other and back within a step, and each read still names what a fresh walk
    names (the innermost frame's names win)."""
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    outer: dict[str, Any] = {"t": (torch.ones(1),)}
    inner: dict[str, Any] = {"t": (torch.ones(2), torch.ones(3))}
    scopes = [("f:", outer), ("f:", inner)]
    for step in range(6):
        frame = (outer, inner)[step % 2]
        frame["t"] = frame["t"] + (torch.ones(1),)
        walker.walk(scopes)
        fresh = names.NameWalker(ids)
        fresh.walk(scopes)
        assert walker.current == fresh.current
        assert walker.current["f:t[0]"] == ids.of(inner["t"][0])


# (A set's members are labelled by the order they entered it, not by its iteration order, which
# follows addresses that differ from run to run: the whole and the incremental run name them alike.)
@pytest.mark.parametrize("keep", ["set", "frozenset", "tuple", "deque", "list of dicts"])
@pytest.mark.parametrize(("op", "backward"), [("relu", False), ("tanh", True), ("sigmoid", False)])
def test_incremental_snapshots_equal_whole_ones_on_kept_graphs(keep: str, op: str, backward: bool) -> None:
    for loop in ("for", "while"):
        result = _assert_same(kept_graphs(op, 6, keep, loop, backward))
        assert result["ok"], result["error"]


# (a set's labels, which the plain run's resolver cannot read: tests/engine/test_engine_set_labels.py)
@pytest.mark.parametrize("keep", ["tuple", "deque", "list of dicts"])
def test_every_step_says_what_torch_says_on_kept_graphs(keep: str) -> None:
    result = assert_steps_match_plain(kept_graphs("sigmoid", 4, keep, "for", backward=True))
    assert any(name.startswith("kept[3]") for name in result["steps"][-1]["variables"])


SET_RUN = """\
a = torch.randn(4, requires_grad=True)
kept = set()
for i in range(5):
    out = (a * i).tanh().sum()
    kept.add(out)
kept.discard(out)
"""


def test_a_set_names_its_members_by_the_order_they_entered() -> None:
    result = trace(SET_RUN)
    assert result["ok"], result["error"]
    last = result["steps"][-1]
    kept = {name: last["tensors"][tid] for name, tid in last["variables"].items() if name.startswith("kept")}
    assert sorted(kept) == [f"kept{{{i}}}" for i in range(4)]  # (the fifth, discarded, had kept{4})
    # torch: kept{i} is the sum the i-th iteration added (the plain set's own order is by address)
    plain = run_plain(SET_RUN).namespace
    for i in range(4):
        assert kept[f"kept{{{i}}}"]["values"] == pytest.approx((plain["a"] * i).tanh().sum().item())
    assert sorted(fact["values"] for fact in kept.values()) == pytest.approx(
        sorted(t.item() for t in plain["kept"]))
    assert {last["nodes"][fact["grad_fn"]]["name"] for fact in kept.values()} == {"SumBackward0"}
    assert _assert_same(SET_RUN)["ok"]


@pytest.mark.parametrize("keep", ["tuple", "deque", "list of dicts"])
def test_the_members_a_kept_loop_reads_grow_with_the_loop(keep: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tuple rebuilt with one more graph at each iteration is read from its new member on (its
    entry moves to the new tuple), as a list that only grew is."""
    (small, small_steps), (large, large_steps) = (
        _members_read(kept_graphs("tanh", n, keep), monkeypatch) for n in (20, 80))
    assert large_steps / small_steps > 3.4
    # every member read again at each rebuild: 16 times as many for 4 times the steps
    assert large / small < 1.5 * large_steps / small_steps, (small, large)
