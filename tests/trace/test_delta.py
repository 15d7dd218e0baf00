"""The delta format round-trips every golden v1 trace exactly, and its replay says what changed."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from app.schema import ArrayFact, DeltaTrace, RunResult
from app.trace.delta import compress, expand, expanded_size
from app.trace.replay import Timeline, replay
from tests.golden import load

GOLDEN = list(load())


@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_expand_gives_back_the_v1_trace_exactly(golden) -> None:
    v1 = RunResult.model_validate(golden.result)
    delta = DeltaTrace.model_validate(compress(golden.result))
    back = expand(delta)
    assert back == v1
    # the same JSON too (defaults, key sets, NaN spelled as strings)
    assert json.loads(back.model_dump_json()) == json.loads(v1.model_dump_json())


def test_the_estimated_v1_size_is_close_to_the_real_one() -> None:
    for golden in GOLDEN:
        v1 = RunResult.model_validate(golden.result)
        real = len(v1.model_dump_json())
        estimate = expanded_size(DeltaTrace.model_validate(compress(golden.result)))
        assert 0.8 * real - 200 <= estimate <= 1.2 * real + 200, golden.name


def test_a_delta_step_holds_only_what_its_line_changed() -> None:
    first_lines = "x = torch.tensor([1., 2., 3.], requires_grad=True)\nc = x.clone()"
    source = next(g for g in GOLDEN if g.source.startswith(first_lines))
    delta = DeltaTrace.model_validate(compress(source.result))
    first, second = delta.steps[0], delta.steps[1]
    assert list(first.variables) == ["x"] and len(first.tensors) == 1
    # line 2 (c = x.clone()) adds c, its storage and its grad_fn; x is untouched, so not repeated
    assert list(second.variables) == ["c"]
    assert first.variables["x"] not in second.tensors
    assert not second.dropped


def test_replay_reports_old_facts_and_the_timeline_answers_any_step() -> None:
    code = next(g for g in GOLDEN if "x.add_(1)" in g.source or "add_(" in g.source)
    v1 = RunResult.model_validate(code.result)
    delta = DeltaTrace.model_validate(compress(code.result))
    timeline = Timeline(delta)
    for (state, changes), step in zip(replay(delta), v1.steps, strict=True):
        assert state.tensors == step.tensors and state.variables == step.variables
        assert state.nodes == step.nodes and state.storages == step.storages
        for tid, old in changes.old_tensors.items():
            before = v1.steps[changes.index - 1].tensors.get(tid) if changes.index else None
            assert old == before
        for tid in step.tensors:
            assert timeline.tensor(tid, changes.index) == step.tensors[tid]


def _array(names: list[str], values: list[float], storage: str | None) -> dict:
    return {"names": names, "shape": [len(values)], "strides": [4], "dtype": "float32", "itemsize": 4,
            "storage": storage, "offset": 0, "owner": "torch" if storage else "numpy",
            "buffer_nbytes": 4 * len(values), "values": values}


def _tensor(storage: str, values: list[float]) -> dict:
    return {"shape": [len(values)], "dtype": "float32", "stride": [1], "storage_offset": 0,
            "storage": storage, "requires_grad": False, "is_leaf": True, "grad_fn": None, "grad": None,
            "base": None, "version": 0, "values": values}


# t = torch.zeros(2); a = t.numpy(); a[0] = 5; c = np.array(t); del a
ARRAY_STEPS = [
    {"tensors": {"t1": _tensor("s1", [0.0, 0.0])}, "arrays": {}},
    {"tensors": {"t1": _tensor("s1", [0.0, 0.0])}, "arrays": {"a1": _array(["a"], [0.0, 0.0], "s1")}},
    {"tensors": {"t1": _tensor("s1", [5.0, 0.0])}, "arrays": {"a1": _array(["a"], [5.0, 0.0], "s1")}},
    {"tensors": {"t1": _tensor("s1", [5.0, 0.0])},
     "arrays": {"a1": _array(["a"], [5.0, 0.0], "s1"), "a2": _array(["c"], [5.0, 0.0], None)}},
    {"tensors": {"t1": _tensor("s1", [5.0, 0.0])}, "arrays": {"a2": _array(["c"], [5.0, 0.0], None)}},
]


def _array_run() -> RunResult:
    steps = [{"line": i + 1, "stdout": "", "variables": {"t": "t1"}, "storages": {"s1": {"nbytes": 8}},
              "nodes": {}, **step} for i, step in enumerate(ARRAY_STEPS)]
    return RunResult.model_validate({"ok": True, "steps": steps})


def test_array_facts_round_trip_through_the_delta_format() -> None:
    v1 = _array_run()
    data = compress(v1)
    assert [set(step.get("arrays", {})) for step in data["steps"]] == [set(), {"a1"}, {"a1"}, {"a2"}, set()]
    assert data["steps"][4]["dropped"] == {"arrays": ["a1"]}
    delta = DeltaTrace.model_validate(data)
    assert expand(delta) == v1
    assert json.loads(expand(delta).model_dump_json()) == json.loads(v1.model_dump_json())
    assert expanded_size(delta) > 0


def test_replay_and_the_timeline_carry_arrays() -> None:
    delta = DeltaTrace.model_validate(compress(_array_run()))
    seen = []
    for state, changes in replay(delta):
        seen.append((sorted(state.arrays), changes.appeared("arrays"), changes.dropped("arrays")))
        if changes.index == 2:  # a[0] = 5: the array's fact before the write is at hand
            assert changes.old_arrays["a1"].values == [0.0, 0.0]
            assert state.arrays["a1"].values == [5.0, 0.0]
    assert seen == [([], [], []), (["a1"], ["a1"], []), (["a1"], [], []), (["a1", "a2"], ["a2"], []),
                    (["a2"], [], ["a1"])]
    timeline = Timeline(delta)
    assert timeline.array("a1", 1).storage == "s1" and timeline.array("a1", 4) is None
    assert timeline.array("a2", 4).storage is None


def test_array_facts_are_bounded_like_the_others() -> None:
    good = _array(["a"], [1.0], "s1")
    for bad in ({"names": ["x" * 201]}, {"names": [f"n{i}" for i in range(9)]}, {"dtype": "f" * 33},
                {"shape": [1] * 65}, {"storage": "s" * 17}, {"owner": "somebody"}, {"extra": 1}):
        with pytest.raises(ValidationError):
            ArrayFact.model_validate({**good, **bad})
