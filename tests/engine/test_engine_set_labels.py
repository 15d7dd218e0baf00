"""A set's members are labelled in the order they entered it (``s{0}``, ``s{1}`` …) and keep their
label while they stay (``app.engine.labels``): an add binds one name and a removal drops one, where
naming by the set's iteration order renamed a quarter of a kept-graph set at each add. Each label
names the very tensor a parallel list names (checked against torch at every step), in a set, a set
of tuples and a frozenset (of tensors, of tuples) rebuilt at each iteration; the incremental
snapshot equals the whole one; a step reads a kept set's new members only."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch_oracle import assert_steps_match_plain, trace

from app.bench.snippets import kept_graphs
from app.engine import EngineLimits, names, trace_delta
from app.engine.ids import ObjectIds
from tests.engine.test_engine_incremental import _assert_same

# how the loop keeps ``out`` beside ``order.append(out)``, takes ``order[2]`` out and puts it back;
# the suffix from a label to its tensor
KEEPS = {
    "set": ("kept = set()", "kept.add(out)", "kept.discard(held)", "kept.add(held)", ""),
    "set of tuples": ("kept = set()", "kept.add((out, i))", "kept.discard((held, 2))",
                      "kept.add((held, 2))", "[0]"),
    "frozenset": ("kept = frozenset()", "kept = kept | {out}", "kept = kept - {held}",
                  "kept = kept | {held}", ""),
    "frozenset of tuples": ("kept = frozenset()", "kept = kept | {(out, i)}", "kept = kept - {(held, 2)}",
                            "kept = kept | {(held, 2)}", "[0]"),
}


def _source(keep: str, op: str) -> str:
    before, keeping, out, back, _ = KEEPS[keep]
    return f"""\
a = torch.randn(4, requires_grad=True)
{before}
order = []
for i in range(6):
    out = {op}
    {keeping}
    order.append(out)
held = order[2]
{out}
{back}
"""


_LABEL = re.compile(r"kept\{(\d+)\}")


def _labels(variables: dict[str, str], suffix: str) -> dict[int, str]:
    found = {}
    for name, tid in variables.items():
        match = _LABEL.fullmatch(name.removesuffix(suffix)) if name.endswith(suffix) else None
        if match:
            found[int(match.group(1))] = tid
    return found


@pytest.mark.parametrize("op", ["(a * i).tanh().sum()", "torch.sigmoid(a * i).mean()", "(a * i).exp()[1:3]"])
@pytest.mark.parametrize("keep", list(KEEPS))
def test_a_member_keeps_its_label_while_it_stays(keep: str, op: str) -> None:
    source = _source(keep, op)
    suffix = KEEPS[keep][-1]
    steps = trace(source)["steps"]
    before: dict[int, str] = {}
    for step in steps:
        labels = _labels(step["variables"], suffix)
        order = [step["variables"][f"order[{j}]"] for j in range(6) if f"order[{j}]" in step["variables"]]
        for label, tid in labels.items():
            # the j-th member in is order[j] (``out`` until appended); held (order[2]), taken out and
            # put back, is a new member
            expected = order[2] if label == 6 else \
                order[label] if label < len(order) else step["variables"]["out"]
            assert tid == expected, (step["line"], label)
            assert before.get(label, tid) == tid, (step["line"], label)  # a label names one tensor
        before |= labels
    last = _labels(steps[-1]["variables"], suffix)
    assert sorted(last) == [0, 1, 3, 4, 5, 6]
    assert _labels(steps[-2]["variables"], suffix).keys() == {0, 1, 3, 4, 5}  # held out
    # torch: every step's tensors, the labels' included (they are the order list's), as a plain run's
    assert_steps_match_plain(source, skip=frozenset(
        name for step in steps for name in step["variables"] if name.startswith("kept")))
    _assert_same(source)


@pytest.mark.parametrize("keep", ["set", "set of tuples", "frozenset", "frozenset of tuples"])
@pytest.mark.parametrize(("op", "backward"), [("relu", False), ("tanh", True)])
def test_a_kept_loop_binds_one_label_per_add(keep: str, op: str, backward: bool) -> None:
    result = _assert_same(kept_graphs(op, 12, keep, "for", backward))
    assert result["ok"], result["error"]
    named: dict[str, Any] = {}
    for step in trace(kept_graphs(op, 12, keep, "for", backward))["steps"]:
        kept = {name: tid for name, tid in step["variables"].items() if name.startswith("kept")}
        assert all(named.get(name, tid) == tid for name, tid in kept.items()), step["line"]  # no rename
        named |= kept
    assert len(named) == 12


def test_a_dead_members_address_taken_by_a_new_member() -> None:
    """A tensor that left the set and died, and a new one at its address put in (CPython reuses the
    memory): a new member, under a new label, named as the new tensor."""
    source = """\
s = set()
for i in range(4):
    s.add(torch.full((2,), float(i)))
for i in range(3):
    s.discard(max(s, key=lambda t: t[0].item())); s.add(torch.full((3,), -1.0 - i))
"""
    steps = trace(source)["steps"]
    last = steps[-1]
    names = sorted(name for name in last["variables"] if name.startswith("s{"))
    assert len(names) == 4 and len(set(names)) == 4
    shapes = sorted(tuple(last["tensors"][last["variables"][n]]["shape"]) for n in names)
    assert shapes == [(2,), (3,), (3,), (3,)]
    assert {n for n in names if last["tensors"][last["variables"][n]]["shape"] == [3]} == \
        {"s{4}", "s{5}", "s{6}"}
    _assert_same(source)


_ALIVE: list[Any] = []
REUSED: list[bool] = []


def _replaced_at_its_address(s: set) -> None:
    """A member tuple taken out (freed, what it held kept alive: no death says it) and a new tuple
    of its length put in, which CPython's tuple free list places at the old one's address: a new
    member."""
    old = max(s, key=lambda member: member[0].numel() if type(member) is tuple and member else -1)
    address, length = id(old), len(old)
    _ALIVE.extend(old)
    s.discard(old)
    del old
    new = (torch.zeros(5), 9) if length == 2 else (torch.zeros(5),)
    REUSED.append(id(new) == address)
    s.add(new)


def _nested_tuple(s: set) -> None:
    s.add((torch.ones(1), (torch.ones(2), 1)))  # a tuple that holds a tuple: every member read again


CHANGES: list[Callable[[set], None]] = [
    lambda s: s.add((torch.ones(1), 0)),
    lambda s: s.update({(torch.ones(2), 1), (torch.ones(3), torch.ones(1))}),
    _replaced_at_its_address,
    lambda s: s.add((torch.ones(4), 2)),
    _replaced_at_its_address,
    lambda s: s.discard(next(iter(s))),
    lambda s: s.add(torch.ones(6)),  # a tensor among the tuples: not all tuples now
    lambda s: s.discard(next(m for m in s if type(m) is not tuple)),
    lambda s: s.add((torch.ones(7),)),  # tuples of two lengths
    lambda s: s.discard(next(m for m in s if len(m) == 1)),
    _nested_tuple,
    lambda s: s.discard(next(m for m in s if type(m[1]) is tuple)),
    lambda s: s.add(()),
    lambda s: s.clear(),
    lambda s: s.add((torch.ones(1), 0)),
    _replaced_at_its_address,
]


def test_a_set_of_tuples_after_every_change() -> None:
    """The cached walk of a set of tuples (checked by what its tuples hold) names the tensors a
    fresh walk names, each member under the label it entered with."""
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    namespace: dict[str, Any] = {"s": {(torch.ones(1), torch.ones(1))}, "t": torch.ones(1)}
    walker.walk([("", namespace)])
    labels: dict[str, dict[str, str]] = {}
    for change in CHANGES:
        change(namespace["s"])
        for _ in range(2):  # and unchanged, the step after
            walker.walk([("", namespace)])
            fresh = names.NameWalker(ids)
            fresh.walk([("", namespace)])
            members = {tid: name for name, tid in walker.current.items() if name.startswith("s{")}
            assert sorted(members) == sorted(t for n, t in fresh.current.items() if n.startswith("s{"))
            for tid, name in members.items():
                before = labels.get("s", {})
                # a member keeps its label; a new one (a new tuple at an old address too) takes a new one
                assert before.get(tid, name) == name, (change, tid)
                if tid not in before:
                    member = name[: name.index("}") + 1]
                    assert all(not old.startswith(member) for old in before.values()), (change, name)
            labels["s"] = members
    assert any(REUSED)  # (where CPython does not reuse the memory, the check above still holds)


def _members_read(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(members the walk read, steps) of one run."""
    read = 0
    items = names.NameWalker._items

    def counted(self: names.NameWalker, found: list, path: Any) -> Any:
        nonlocal read
        read += len(found)
        return items(self, found, path)

    with monkeypatch.context() as patch:
        patch.setattr(names.NameWalker, "_items", counted)
        result = trace_delta(source, EngineLimits())
    assert result["ok"] and not result["truncated"], result["error"]
    return read, len(result["steps"])


@pytest.mark.parametrize("keep", ["set", "set of tuples", "frozenset", "frozenset of tuples"])
def test_the_members_a_kept_set_reads_grow_with_the_loop(keep: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step reads the set's new members only, not every member again (by label: naming by
    the set's iteration order renamed, and read, a quarter of the set at each add)."""
    (small, small_steps), (large, large_steps) = (
        _members_read(kept_graphs("tanh", n, keep), monkeypatch) for n in (20, 80))
    assert large_steps / small_steps > 3.4
    assert large / small < 1.5 * large_steps / small_steps, (small, large)
