"""The delta format round-trips every golden v1 trace exactly, and its replay says what changed."""

from __future__ import annotations

import json

import pytest

from app.schema import DeltaTrace, RunResult
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
