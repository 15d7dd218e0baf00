"""``Holding`` (kept step by step from the deltas) agrees with the whole-step definitions on every
golden trace: the named set, each tensor's names and holders, and the memory totals."""

from __future__ import annotations

import pytest

from app.schema import DeltaTrace, RunResult
from app.trace.delta import compress
from app.trace.holding import Holding, holders_in, named_storages, names_in
from app.trace.replay import replay
from tests.golden import load

GOLDEN = list(load())


def _bytes(step, sids) -> int:
    return sum(step.storages[s].nbytes for s in sids if s in step.storages)


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_incremental_holding_equals_the_whole_step_answer(golden) -> None:
    v1 = RunResult.model_validate(golden.result)
    holding = Holding()
    for (state, changes), step in zip(replay(DeltaTrace.model_validate(compress(golden.result))), v1.steps,
                                      strict=True):
        holding.update(state, changes)
        names = names_in(step)
        assert holding.named == set(names)
        for tid, expected in names.items():
            assert sorted(holding.names(tid)) == sorted(expected)
        holders = holders_in(step)
        for tid in step.tensors:
            assert sorted(holding.holders(tid)) == sorted(holders.get(tid, []))
        through = named_storages(step)
        users: dict[str, int] = {}
        for fact in step.tensors.values():
            if fact.storage is not None:
                users[fact.storage] = users.get(fact.storage, 0) + 1
        assert holding.total_bytes == _bytes(step, step.storages)
        assert holding.variable_bytes == _bytes(step, through)
        assert holding.graph_bytes == _bytes(step, set(step.storages) - through)
        assert holding.shared_bytes == _bytes(step, [s for s, n in users.items() if n >= 2])
        assert holding.graph_storages() == sorted(set(step.storages) - through)


def test_a_cycle_through_grad_and_base_is_not_named_by_itself() -> None:
    """x.grad = x[:] makes x → grad → base → x: once no variable names them, neither is named."""
    from app.schema import DeltaStep, Dropped, StorageFact, TensorFact

    def fact(**kw) -> TensorFact:
        base = {"shape": [2], "dtype": "float32", "stride": [1], "storage_offset": 0, "storage": "s1",
                "requires_grad": True, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
                "version": 0}
        return TensorFact(**{**base, **kw})

    trace = DeltaTrace(ok=True, steps=[
        DeltaStep(line=1, variables={"x": "t1"}, tensors={"t1": fact()},
                  storages={"s1": StorageFact(nbytes=8)}),
        DeltaStep(line=2, tensors={"t1": fact(grad="t2"), "t2": fact(base="t1", requires_grad=False)}),
        DeltaStep(line=3, dropped=Dropped(variables=["x"])),
    ])
    holding = Holding()
    seen = []
    for state, changes in replay(trace):
        holding.update(state, changes)
        seen.append(set(holding.named))
    assert seen == [{"t1"}, {"t1", "t2"}, set()]
    assert holding.variable_bytes == 0 and holding.graph_bytes == 8
