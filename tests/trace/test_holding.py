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


def _renamed_by_definition(state, changes) -> set[str]:
    """Every tensor the step set, dropped or (re)named, and what their .grad/._base chains reach now
    or before: the tensors whose names may read differently after the step."""
    start = set(changes.old_tensors)
    for name, old in changes.old_variables.items():
        if old != state.variables.get(name):
            start.update(t for t in (old, state.variables.get(name)) if t is not None)
    found = set(start)
    while True:  # grow to a fixpoint (the implementation walks a queue)
        facts = [f for t in found for f in (state.tensors.get(t), changes.old_tensors.get(t)) if f]
        more = {t for f in facts for t in (f.grad, f.base) if t is not None} - found
        if not more:
            return found
        found |= more


def _quiet_resets() -> DeltaTrace:
    """An optimizer's steps: w and its .grad set anew (new version, same storage, .grad and ._base)
    every step, a view of w, w given a new .grad, and a .grad/._base cycle set anew once no name holds
    it."""
    from app.schema import DeltaStep, Dropped, StorageFact, TensorFact

    def fact(storage: str = "s1", **kw) -> TensorFact:
        base = {"shape": [2], "dtype": "float32", "stride": [1], "storage_offset": 0, "storage": storage,
                "requires_grad": True, "is_leaf": True, "grad_fn": None, "grad": None, "base": None,
                "version": 0}
        return TensorFact(**{**base, **kw})

    storages = {"s1": StorageFact(nbytes=8), "s2": StorageFact(nbytes=8)}
    steps = [DeltaStep(line=1, variables={"w": "t1", "v": "t3"}, storages=storages,
                       tensors={"t1": fact(grad="t2"), "t2": fact("s2"), "t3": fact(base="t1")})]
    for version in range(1, 4):
        steps.append(DeltaStep(line=2, tensors={"t1": fact(grad="t2", version=version),
                                                 "t2": fact("s2", version=version)}))
    steps.append(DeltaStep(line=2, tensors={"t1": fact(grad="t6", version=4), "t6": fact("s4")},
                           storages={"s4": StorageFact(nbytes=8)},
                           dropped=Dropped(tensors=["t2"], storages=["s2"])))
    steps.append(DeltaStep(line=3, tensors={"t4": fact("s3", grad="t5"), "t5": fact("s3", base="t4")},
                           variables={"c": "t4"}, storages={"s3": StorageFact(nbytes=8)}))
    steps.append(DeltaStep(line=4, dropped=Dropped(variables=["c", "w"])))
    steps.append(DeltaStep(line=5, tensors={"t4": fact("s3", grad="t5", version=1),
                                             "t1": fact(grad="t6", version=9)}))
    return DeltaTrace(ok=True, steps=steps)


@pytest.mark.parametrize("trace", [_quiet_resets(), *(DeltaTrace.model_validate(compress(g.result))
                                                      for g in GOLDEN)],
                         ids=["quiet-resets", *(g.name for g in GOLDEN)])
def test_what_a_step_reports_renamed_is_the_definitions(trace: DeltaTrace) -> None:
    """Tensors set anew and held as before skip the reclassification, never the report."""
    holding = Holding()
    for state, changes in replay(trace):
        out = holding.update(state, changes)
        assert out.renamed == _renamed_by_definition(state, changes), changes.index


def test_tensors_set_anew_keep_their_holding() -> None:
    """w's view v keeps naming w (and its .grad, then its new .grad) through ._base; the t4/t5 cycle
    set anew stays unnamed."""
    holding = Holding()
    named, graph_bytes = [], []
    for state, changes in replay(_quiet_resets()):
        holding.update(state, changes)
        named.append(set(holding.named))
        graph_bytes.append(holding.graph_bytes)
    assert named == [{"t1", "t2", "t3"}] * 4 + [{"t1", "t3", "t6"}, {"t1", "t3", "t4", "t5", "t6"}] \
        + [{"t1", "t3", "t6"}] * 2
    assert graph_bytes == [0] * 6 + [8, 8]
