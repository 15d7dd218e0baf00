"""A set's members are labelled in the order they entered it (``s{0}``, ``s{1}`` …) and keep their
label while they stay (``app.engine.labels``): an add binds one name and a removal drops one, where
naming by the set's iteration order renamed a quarter of a kept-graph set at each add. Each label
names the very tensor a parallel list names (checked against torch at every step), in a set, a set
of tuples and a frozenset rebuilt at each iteration; the incremental snapshot equals the whole one."""

from __future__ import annotations

import re
from typing import Any

import pytest
from torch_oracle import assert_steps_match_plain, trace

from app.bench.snippets import kept_graphs
from tests.engine.test_engine_incremental import _assert_same

# how the loop keeps ``out`` beside ``order.append(out)``, takes ``order[2]`` out and puts it back;
# the suffix from a label to its tensor
KEEPS = {
    "set": ("kept = set()", "kept.add(out)", "kept.discard(held)", "kept.add(held)", ""),
    "set of tuples": ("kept = set()", "kept.add((out, i))", "kept.discard((held, 2))",
                      "kept.add((held, 2))", "[0]"),
    "frozenset": ("kept = frozenset()", "kept = kept | {out}", "kept = kept - {held}",
                  "kept = kept | {held}", ""),
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


@pytest.mark.parametrize("keep", ["set", "set of tuples", "frozenset"])
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
