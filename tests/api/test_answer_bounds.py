"""A forged answer cannot blow up the server's memory (issue 25, hole 3): counts and sizes are checked
before objects are built. Frames are at most ``FRAME_MAX`` bytes (a larger step travels in parts and
reads back whole), and the steps and entries (``app.trace.consistency.weight``) of an answer are
counted from each frame's parsed JSON before pydantic builds a model of any.

Memory is measured with tracemalloc (Python's own allocations: orjson's and pydantic's objects), a
count, not a clock. The issue's forged frame of 760,000 one-field steps took 2.6 GiB of models."""

from __future__ import annotations

import tempfile
import time
import tracemalloc

import orjson
import pytest

from app.config import Settings
from app.engine import trace_delta
from app.sandbox import child, frames
from app.sandbox.frames import CONTINUED, FRAME_MAX, HEADER, encode_frame
from app.sandbox.runner import BYTES_PER_WEIGHT, AnswerReader, bounds_for, parse_result
from app.schema import DeltaTrace
from app.trace.consistency import Bounds, weight
from app.trace.delta import compress
from tests import golden

ENVELOPE = b'{"format":"delta","ok":true,"truncated":false,"error":null}'
SETTINGS = Settings()
BOUNDS = bounds_for("x = 1\n", SETTINGS)


def _stream(writes, bounds: Bounds) -> tuple[list[tuple[int, bool]], DeltaTrace]:  # noqa: ANN001
    """What ``writes(fd)`` writes as a child's answer: each frame's size and flag, and the trace the
    pool's reader makes of it."""
    with tempfile.TemporaryFile() as file:
        writes(file.fileno())
        file.seek(0)
        data = file.read()
        sizes, at = [], 0
        while at < len(data):
            (word,) = HEADER.unpack_from(data, at)
            sizes.append((word & ~CONTINUED, bool(word & CONTINUED)))
            at += HEADER.size + (word & ~CONTINUED)
        file.seek(0)
        reader = AnswerReader(bounds)
        raw, stopped, envelope = frames.read_answer(file.fileno(), SETTINGS.max_result_bytes,
                                                    time.monotonic() + 60, reader.add)
        assert stopped is None and envelope is not None, raw[:200]
        return sizes, reader.result(envelope)


@pytest.mark.parametrize("code", [
    "ts = [torch.ones(1, requires_grad=True) * 2 for i in range(2000)]\n",
    "d = {f'k{i}': torch.ones(2) for i in range(6000)}\nd.clear()\n",
    "ts = [torch.ones(1) for i in range(9000)]\nus = [t.view(1, 1) for t in ts]\ndel ts\n",
], ids=["graph", "dict-then-clear", "views-then-del"])
def test_a_step_larger_than_a_frame_travels_in_parts_and_reads_back_whole(code: str) -> None:
    result = trace_delta(code)
    largest = max(len(child._encode(step)) for step in result["steps"])
    assert largest > FRAME_MAX  # the engine's own steps, several MiB each

    def writes(fd: int) -> None:
        stream = child.ResultStream(fd, SETTINGS.max_result_bytes)
        stream.finish(result)

    sizes, trace = _stream(writes, bounds_for(code, SETTINGS))
    assert all(size <= FRAME_MAX for size, _ in sizes)
    assert any(continued for _, continued in sizes)
    assert trace.error is None, trace.error
    assert trace.model_dump() == DeltaTrace.model_validate(result).model_dump()


def _frame_of(steps: list[dict]) -> bytes:
    return b"[" + b",".join(orjson.dumps(s) for s in steps) + b"]"


def _parts_answer(parts: list[dict], more: bool = True) -> bytes:
    first, *rest = parts
    data = encode_frame(_frame_of([first]), continued=more)
    for n, part in enumerate(rest):
        data += encode_frame(_frame_of([part]), continued=n < len(rest) - 1)
    return data + encode_frame(ENVELOPE)


@pytest.mark.parametrize(("parts", "ends"), [
    ([{"line": 1, "variables": {"a": "t1"}}], False),  # a part that never comes
    ([{"line": 1}, {"line": 1, "stdout": "x"}], True),  # a part with more than facts
    ([{"line": 1}, {"line": 2}], True),  # a part of another line
    ([{"line": 1, "storages": {"s1": {"nbytes": 4}}}, {"line": 1, "storages": {"s1": {"nbytes": 4}}}], True),
], ids=["never-ends", "not-only-facts", "other-line", "fact-twice"])
def test_forged_parts_make_the_answer_unusable(parts: list[dict], ends: bool) -> None:
    with tempfile.TemporaryFile() as file:
        if ends:
            file.write(_parts_answer(parts))
        else:
            file.write(encode_frame(_frame_of(parts), continued=True) + encode_frame(ENVELOPE))
        file.seek(0)
        reader = AnswerReader(BOUNDS)
        _, _, envelope = frames.read_answer(file.fileno(), 1 << 23, time.monotonic() + 10, reader.add)
    assert envelope is not None
    result = reader.result(envelope)
    assert result.error is not None and result.error.type == "UnusableAnswer" and not result.steps


def test_a_frame_past_the_limit_is_not_read() -> None:
    """The issue's forged answer: one 8 MiB frame of steps and a valid envelope."""
    body = b"[" + b",".join([b'{"line":1}'] * 760_000) + b"]"
    seen: list[bytes] = []
    with tempfile.TemporaryFile() as file:
        file.write(encode_frame(body) + encode_frame(ENVELOPE))
        file.seek(0)
        data, stopped, envelope = frames.read_answer(file.fileno(), 1 << 24, time.monotonic() + 10,
                                                     lambda frame, _: seen.append(frame))
    assert envelope is None and not seen and len(data) == HEADER.size  # its header only
    assert parse_result(data, 1 << 23, BOUNDS).error.code == "internal.unusable_frame"


def _peak(work) -> tuple[object, float]:  # noqa: ANN001
    tracemalloc.start()
    try:
        result = work()
        return result, tracemalloc.get_traced_memory()[1] / (1 << 20)
    finally:
        tracemalloc.stop()


# Frames of at most FRAME_MAX bytes that would each build far more than they weigh
ONE_FIELD_STEPS = b"[" + b",".join([b'{"line":1}'] * 95_000) + b"]"  # 184 MiB of models
ONE_FIELD_NODES = _frame_of([{"line": 1, "nodes": {f"n{i}": {"name": "", "next": []}
                                                   for i in range(n, n + 2600)}}
                             for n in range(0, 26_000, 2600)])


@pytest.mark.parametrize(("frame", "copies", "said"), [
    (ONE_FIELD_STEPS, 8, "more than the 10000 steps allowed"),
    (ONE_FIELD_NODES, 8, "more facts and names than the 524288 allowed"),
], ids=["one-field-steps", "one-field-nodes"])
def test_an_answer_is_counted_before_it_is_built(frame: bytes, copies: int, said: str) -> None:
    assert len(frame) <= FRAME_MAX

    def read() -> DeltaTrace:
        reader = AnswerReader(BOUNDS)
        for copy in range(copies):  # the nodes' ids repeat: counted before anything checks them
            reader.add(frame)
            assert copy < 6 or reader.over is not None
        return reader.result(ENVELOPE)

    result, peak = _peak(read)
    assert said in result.error.message and not result.steps
    # one frame's parsed JSON at a time and the steps before the count passed (the 2.6 GiB)
    assert peak < 160, f"{peak:.0f} MiB"


def test_a_whole_document_is_counted_before_it_is_built() -> None:
    document = b'{"format":"delta","ok":true,"steps":' + ONE_FIELD_STEPS + b"}"
    result, peak = _peak(lambda: parse_result(encode_frame(document), FRAME_MAX, BOUNDS))
    assert "more than the 10000 steps allowed" in result.error.message
    assert peak < 40, f"{peak:.0f} MiB"  # the parsed JSON only: the models were 184 MiB


def test_the_weight_bound_leaves_every_engine_answer_a_wide_margin() -> None:
    """Every golden trace, and the engine's own answers that weigh the most per byte, use at most
    half of what their size may weigh."""
    heaviest = (
        "a=b=c=d=e=f=g=h=torch.ones(1)\n" * 50,
        "for k in range(3):\n    ts = [torch.ones(1) for i in range(3000)]\n    del ts\n",
        "d = {f'k{i}': torch.ones(1) for i in range(5000)}\n",
    )
    answers = [compress(record.result)["steps"] for record in golden.load()]
    answers += [trace_delta(code)["steps"] for code in heaviest]
    for steps in answers:
        size = len(orjson.dumps(steps))
        facts = sum(len(s.get(k) or {}) for s in steps for k in ("tensors", "storages", "nodes", "arrays"))
        names = sum(len(s.get("variables") or {}) for s in steps) + \
            sum(len(ids) for s in steps for ids in (s.get("dropped") or {}).values())
        assert weight(facts, names) * BYTES_PER_WEIGHT * 2 <= max(size, 4096), steps[:1]


def test_bounds_come_from_the_settings() -> None:
    bounds = bounds_for("x = 1\n", Settings(max_result_bytes=1 << 20, max_steps=7))
    weighs = (1 << 20) // BYTES_PER_WEIGHT
    assert bounds == Bounds(lines=2, max_steps=7, max_stdout=64 * 1024, max_weight=weighs)
