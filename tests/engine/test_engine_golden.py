"""The engine's answers equal the golden v1 traces (``tests/golden``): incrementally read, and read
whole at every step (``full_snapshots``), for every snippet the test suite and the gallery run.

Memory torch never initialised (``torch.empty``, ``resize_``, the bytes of a storage no tensor covers) holds
whatever was there before, so those values are masked on both sides; everything else must match.
"""

from __future__ import annotations

import itertools
import json
import math
import re

import pytest

from app.engine import EngineLimits, trace_delta
from app.schema import DeltaTrace, RunResult
from app.trace.delta import expand
from tests.golden import Golden, load

ITEMSIZE = {"bool": 1, "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "float16": 2, "bfloat16": 2,
            "float32": 4, "float64": 8, "complex64": 8, "complex128": 16}

# Records made with the engine's internals patched to fail (tests of the failure path) are no oracle.
GOLDEN = [g for g in load() if (g.result.get("error") or {}).get("kind") != "internal"]


def _covered(step: dict, sid: str, element_size: int) -> set[int]:
    cells: set[int] = set()
    for fact in step["tensors"].values():
        if fact["storage"] != sid or not fact["stride"] and fact["shape"]:
            continue
        size = ITEMSIZE.get(fact["dtype"], element_size)
        if math.prod(fact["shape"]) > 4096:
            return set(range(1 << 16))
        for index in itertools.product(*(range(n) for n in fact["shape"])):
            element = fact["storage_offset"] + sum(i * s for i, s in zip(index, fact["stride"], strict=True))
            first = element * size // element_size
            cells.update(range(first, first + max(size // element_size, 1)))
    return cells


ADDRESS = re.compile(r"0x[0-9a-f]+")


def normalised(result: dict, source: str) -> dict:
    result = json.loads(json.dumps(result))
    uninitialised = "empty" in source or "resize_" in source
    for step in result["steps"]:
        step["stdout"] = ADDRESS.sub("0x…", step["stdout"])  # printed objects: where they happen to live
        for sid, storage in step["storages"].items():
            if storage["values"] is None:
                continue
            covered = _covered(step, sid, storage["element_size"])
            storage["values"] = [v if i in covered and not uninitialised else None
                                 for i, v in enumerate(storage["values"])]
        if uninitialised:
            for fact in step["tensors"].values():
                fact["values"] = fact["summary"] = None
    return result


def _engine(golden: Golden, full: bool) -> dict:
    limits = EngineLimits(max_steps=golden.max_steps, max_stdout=golden.max_stdout, full_snapshots=full)
    return expand(DeltaTrace.model_validate(trace_delta(golden.source, limits))).model_dump()


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "whole"])
@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_the_engine_gives_the_golden_v1_trace(golden: Golden, full: bool) -> None:
    want = normalised(RunResult.model_validate(golden.result).model_dump(), golden.source)
    got = normalised(_engine(golden, full), golden.source)
    assert {k: v for k, v in got.items() if k != "steps"} == {k: v for k, v in want.items() if k != "steps"}
    assert len(got["steps"]) == len(want["steps"])
    for index, (a, b) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        assert a == b, f"step {index} (line {b['line']}) differs"
