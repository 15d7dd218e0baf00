"""The answer read frame by frame as the run goes on (``app.sandbox.runner.AnswerReader``) is the
answer ``parse_result`` reads from the whole document: the same trace, or the same refusal, on the
golden traces, every class of forgery and 300 seeded mutations, whatever the frames' sizes."""

from __future__ import annotations

import copy
import itertools
import json
import random

import pytest

from app.config import Settings
from app.sandbox.frames import ANSWER_KEYS, encode_frame
from app.sandbox.runner import AnswerReader, bounds_for, failed, parse_result
from app.schema import DeltaStep
from app.trace.consistency import Bounds
from app.trace.delta import compress
from tests import golden
from tests.api.forgery import mutate
from tests.api.test_forged_traces import CODE, FORGED, _fuzz_corpus


def _read(data: dict, bounds: Bounds, sizes: tuple[int, ...]) -> tuple[object, list[DeltaStep]]:
    """``data`` as the child streams it: its steps in frames of ``sizes``, then its envelope."""
    passed: list[DeltaStep] = []
    reader = AnswerReader(bounds, passed.extend)
    steps = data["steps"]
    start = 0
    for size in itertools.cycle(sizes):
        if start >= len(steps):
            break
        reader.add(json.dumps(steps[start:start + size]).encode())
        start += size
    envelope = {key: value for key, value in data.items() if key in ANSWER_KEYS}
    return reader.result(json.dumps(envelope).encode()), passed


def _same(data: dict, bounds: Bounds, sizes: tuple[int, ...] = (1, 2, 5)) -> None:
    whole = parse_result(encode_frame(json.dumps(data).encode()), 8 << 20, bounds)
    streamed, passed = _read(data, bounds, sizes)
    assert streamed.model_dump() == whole.model_dump()
    # what was handed on early: the steps as sent, in order, up to the first the checks refuse; an
    # answer keeps them all (then it is drawn from them), or fewer (refused as a whole: drawn anew)
    sent = [DeltaStep.model_validate(step).model_dump() for step in data["steps"][:len(passed)]]
    assert [s.model_dump() for s in passed] == sent
    if len(whole.steps) == len(passed):
        assert [s.model_dump() for s in whole.steps] == sent
    assert len(whole.steps) <= len(passed) or whole.error is not None


def test_the_golden_traces_read_the_same_in_frames() -> None:
    for number, record in enumerate(golden.load()):
        bounds = Bounds(record.source.count("\n") + 1, record.max_steps, record.max_stdout)
        _same(compress(record.result), bounds, ((1,), (3, 1), (1000,))[number % 3])


@pytest.mark.parametrize(("data", "reason"), [f[1:] for f in FORGED], ids=[f[0] for f in FORGED])
def test_each_forgery_is_refused_the_same_in_frames(data: dict, reason: str) -> None:
    _same(data, bounds_for(CODE, Settings()))
    streamed, passed = _read(data, bounds_for(CODE, Settings()), (1,))
    assert reason in streamed.error.message


def test_mutated_traces_read_the_same_in_frames() -> None:
    rng = random.Random(20261202)
    corpus = _fuzz_corpus()
    kinds = set()
    for _ in range(300):
        record, base = rng.choice(corpus)
        data = copy.deepcopy(base)
        mutate(data, rng, rng.choice([1, 1, 2, 3]))
        if not isinstance(data.get("steps"), list):
            continue
        bounds = Bounds(record.source.count("\n") + 1, record.max_steps, record.max_stdout)
        _same(data, bounds, rng.choice([(1,), (2, 3), (50,)]))
        whole = parse_result(encode_frame(json.dumps(data).encode()), 8 << 20, bounds)
        kinds.add(whole.error.code if whole.error is not None else "accepted")
    # the corpus reaches both outcomes: accepted, and refused by the checks
    assert "accepted" in kinds and len(kinds) >= 2, kinds


def test_an_answer_with_too_many_steps_is_refused_as_a_whole() -> None:
    data = {"format": "delta", "ok": True, "truncated": False, "error": None,
            "steps": [{"line": 1}] * 5}
    _same(data, Bounds(lines=1, max_steps=3))
    streamed, _ = _read(data, Bounds(lines=1, max_steps=3), (2,))
    assert "more than the 3 steps allowed" in streamed.error.message and streamed.steps == []


@pytest.mark.parametrize("bad", [{"line": "one"}, {"line": 1, "tensors": []}, 7],
                         ids=["line", "tensors", "int"])
def test_a_step_the_schema_refuses_refuses_the_answer_in_any_frame(bad: object) -> None:
    steps = [{"line": 1}, {"line": 1}, bad, {"line": 1}]
    data = {"format": "delta", "ok": True, "truncated": False, "error": None, "steps": steps}
    for sizes in ((1,), (2,), (4,)):
        _same(data, Bounds(lines=1), sizes)
        streamed, _ = _read(data, Bounds(lines=1), sizes)
        assert streamed.error.code == "internal.unusable_schema" and streamed.steps == []


def test_an_envelope_the_schema_refuses_refuses_the_answer() -> None:
    data = {"format": "delta", "ok": "maybe", "truncated": False, "error": None, "steps": [{"line": 1}]}
    _same(data, Bounds(lines=1))


def _streamed(steps: list, sizes: int = 2) -> AnswerReader:
    reader = AnswerReader(Bounds(lines=1, max_steps=10))
    for start in range(0, len(steps), sizes):
        reader.add(json.dumps(steps[start:start + sizes]).encode())
    return reader


def test_a_run_the_server_stopped_keeps_the_steps_that_reached_it() -> None:
    """The server's own deadline (or a signal) ended the child before its envelope: the steps read so
    far are the run up to there, as the child's own stop would have answered."""
    reader = _streamed([{"line": 1}] * 5)
    kept = reader.kept(failed("timeout", "timeout.wall", {"seconds": 5.0}, "Timeout"))
    assert len(kept.steps) == 5 and kept.truncated and not kept.ok
    assert kept.error.code == "timeout.wall_shown" and kept.error.params == {"seconds": 5.0}
    memory = reader.kept(failed("memory", "memory.killed", {"mib": 512}))
    assert len(memory.steps) == 5 and memory.error.code == "memory.killed"


def test_what_the_checks_refused_is_not_kept() -> None:
    good, bad = {"line": 1}, {"line": 1, "dropped": {"tensors": ["t9"]}}  # drops what never existed
    reader = _streamed([good, good, good, bad, good])
    kept = reader.kept(failed("timeout", "timeout.wall", {"seconds": 5.0}, "Timeout"))
    assert len(kept.steps) == 3
    invalid = _streamed([good, good, {"line": "one"}, good])
    refused = failed("timeout", "timeout.wall", {"seconds": 5.0}, "Timeout")
    assert invalid.kept(refused) is refused  # a frame the schema refused: the answer is unusable
    ours = failed("internal", "internal.unusable", error_type="UnusableAnswer")
    assert _streamed([good]).kept(ours) is ours
    assert _streamed([]).kept(refused) is refused
    # never more steps than an honest run may have
    assert len(_streamed([good] * 12).kept(refused).steps) == 10
