"""A container of plain tuples or dicts (``history.append((loss, acc))``, ``{'loss': loss}``, an
optimizer's state) is checked at each step by the ids its tuples hold and its dicts' version tags,
in C-speed passes, instead of reading each member again (``names._Entry.fixed``): the cached walk
still names, after every change, what a fresh walk names — a member replaced by another at the same
address included —, the incremental snapshot equals the whole one, and the members a run reads grow
with the loop, not with the loop times what it kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from app.engine import EngineLimits, names, trace_delta
from app.engine.ids import ObjectIds
from tests.engine.test_engine_incremental import _assert_same


def _same_address(xs: list) -> None:
    """The first tuple replaced by a new one that takes its memory (CPython's tuple free list): the
    list's item addresses read as before, what the tuple holds does not."""
    xs[0] = None
    xs[0] = (torch.zeros(3), 5)  # (where CPython does not reuse the memory, still a change)


def _nested_list(xs: list) -> None:
    xs.append(([torch.ones(1)], 1))  # a tuple that holds a list: read again at each step


def _mutate_nested(xs: list) -> None:
    for item in xs:
        if type(item) is tuple and type(item[0]) is list:
            item[0].append(torch.ones(2))


CHANGES: list[Callable[[list], None]] = [
    lambda xs: xs.append((torch.ones(1), 0)),
    lambda xs: xs.extend([(torch.ones(2), 1), (torch.ones(3), torch.ones(1))]),
    _same_address,
    lambda xs: xs.append(torch.ones(4)),  # a tensor among the tuples
    lambda xs: xs.append(()),
    lambda xs: xs.reverse(),
    lambda xs: xs.pop(0),
    _nested_list,
    _mutate_nested,
    lambda xs: xs.append((torch.ones(1), "x")),
    _mutate_nested,
    lambda xs: xs.pop(),
    lambda xs: xs.append({"d": torch.ones(1)}),  # a dict: read again at each step
    lambda xs: xs[-1].update(e=torch.ones(2)),
    lambda xs: xs.clear(),
    lambda xs: xs.append((torch.ones(1),)),
    _same_address,
]


def _check(walker: names.NameWalker, ids: ObjectIds, namespace: dict[str, Any], change: object) -> None:
    walker.walk([("", namespace)])
    fresh = names.NameWalker(ids)
    fresh.walk([("", namespace)])
    assert walker.current == fresh.current, change


def test_the_cached_walk_names_what_a_fresh_walk_names_after_every_change_of_a_list_of_tuples() -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    xs = [(torch.ones(1), 0), (torch.ones(1), torch.ones(2))]
    namespace = {"xs": xs, "t": torch.ones(1)}
    walker.walk([("", namespace)])
    for change in CHANGES:
        change(xs)
        _check(walker, ids, namespace, change)
        _check(walker, ids, namespace, change)  # and unchanged, the step after


def _new_dict_same_place(xs: list) -> None:
    xs[0] = None
    xs[0] = {"loss": torch.zeros(2)}  # (where CPython does not reuse the memory, still a change)


DICT_CHANGES: list[Callable[[list], None]] = [
    lambda xs: xs.append({"loss": torch.ones(1), "epoch": 1}),
    lambda xs: xs[0].__setitem__("loss", torch.ones(3)),  # a member changed in place
    lambda xs: xs[1].__setitem__("acc", torch.ones(1)),
    lambda xs: xs[1].pop("loss"),
    _new_dict_same_place,
    lambda xs: xs.append((torch.ones(1), 2)),  # tuples and dicts side by side
    lambda xs: xs[0].update(more=torch.ones(2), other=torch.ones(2)),
    lambda xs: xs[0].__setitem__("listed", [torch.ones(1)]),  # now a dict that holds a list
    lambda xs: xs[0]["listed"].append(torch.ones(4)),
    lambda xs: xs[0].pop("listed"),
    lambda xs: xs[0].clear(),
    lambda xs: xs.append({}),
    lambda xs: xs[-1].__setitem__(3, torch.ones(1)),
]


def test_the_cached_walk_names_what_a_fresh_walk_names_after_every_change_of_a_list_of_dicts() -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    xs = [{"loss": torch.ones(1)}, {"loss": torch.ones(1), "epoch": 0}]
    namespace = {"xs": xs}
    walker.walk([("", namespace)])
    for change in DICT_CHANGES:
        change(xs)
        _check(walker, ids, namespace, change)
        _check(walker, ids, namespace, change)


def test_a_dict_of_tuples_too() -> None:
    ids = ObjectIds("t")
    walker = names.NameWalker(ids)
    d = {i: (torch.ones(1), i) for i in range(30)}
    namespace = {"d": d}
    changes: list[Callable[[], None]] = [
        lambda: d.__setitem__(30, (torch.ones(2), 30)),
        lambda: d.__setitem__(0, None),
        lambda: d.__setitem__(0, (torch.ones(3), 0)),
        lambda: d.pop(5),
        lambda: d.__setitem__("k", (torch.ones(1), [torch.ones(1)])),
        lambda: d["k"][1].append(torch.ones(4)),
    ]
    walker.walk([("", namespace)])
    for change in changes:
        change()
        _check(walker, ids, namespace, change)


RUN = """\
a = torch.randn(4, requires_grad=True)
history = []
pairs = {}
for i in range(6):
    out = (a * i).relu().sum()
    history.append((out, i))
    pairs[i] = (out, out.detach())
history[0] = None
history[0] = (a.sigmoid(), 0)
history.append(([a.exp()], 'listed'))
history[-1][0].append(a.tanh())
pairs[2] = pairs[3]
del history[1:3]
history.reverse()
"""


def test_incremental_snapshots_equal_whole_ones_on_containers_of_tuples() -> None:
    result = _assert_same(RUN)
    assert result["ok"], result["error"]


OPTIMIZER_RUN = """\
model = nn.Linear(3, 2)
opt = torch.optim.Adam(model.parameters(), lr=0.1)
x = torch.randn(4, 3)
history = []
for step in range(3):
    opt.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    history.append({'loss': loss, 'step': step})
state = opt.state[model.weight]
state['exp_avg'] = torch.zeros_like(model.weight)
state.pop('exp_avg_sq')
state['extra'] = [torch.ones(1)]
state['extra'].append(torch.ones(2))
history[0]['loss'] = loss.detach()
history[1].clear()
opt.state[model.bias].clear()
"""


def test_incremental_snapshots_equal_whole_ones_on_optimizer_state_and_dicts() -> None:
    result = _assert_same(OPTIMIZER_RUN)
    assert result["ok"], result["error"]


def _members_read(source: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """(members the walk read, steps) of one run."""
    read = 0
    members = names.members

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        nonlocal read
        found = members(*args, **kwargs)
        read += len(found)
        return found

    with monkeypatch.context() as patch:
        patch.setattr(names, "members", counted)
        result = trace_delta(source, EngineLimits())
    assert result["ok"] and not result["truncated"], result["error"]
    return read, len(result["steps"])


KEPT = """\
a = torch.randn(16, requires_grad=True)
history = []
for i in range({n}):
    out = (a * i).relu().mean()
    history.append((out, i))
"""


def test_a_list_that_keeps_a_tuple_a_step_is_not_read_again_at_each_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    (small, small_steps), (large, large_steps) = (
        _members_read(KEPT.format(n=n), monkeypatch) for n in (20, 80))
    assert large_steps / small_steps > 3.4
    # each tuple read again at each step: 16 times as many members for 4 times the steps
    assert large / small < 1.5 * large_steps / small_steps, (small, large)


KEPT_DICTS = """\
a = torch.randn(16, requires_grad=True)
history = []
for i in range({n}):
    out = (a * i).relu().mean()
    history.append({{'loss': out, 'i': i}})
"""


def test_a_list_that_keeps_a_dict_a_step_is_not_read_again_at_each_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    (small, small_steps), (large, large_steps) = (
        _members_read(KEPT_DICTS.format(n=n), monkeypatch) for n in (20, 80))
    assert large_steps / small_steps > 3.4
    assert large / small < 1.5 * large_steps / small_steps, (small, large)
