"""The engine's answers equal the golden v1 traces (``tests/golden``): incrementally read, and read
whole at every step (``full_snapshots``), for every snippet the test suite and the gallery run.

Since issue 13 a line that runs backward() has one step per autograd node before its own; those
steps are new, and the objects they meet first (the gradients) take id numbers. The forward steps
must be the golden ones with ids renamed consistently: ``canonical`` renames every id by where it
is first reached from the names (variables in name order, then grad_fn / grad / base, next /
variable / saved), and both traces must read the same after renaming — same objects, same facts,
same structure, only the labels may differ.

Float values are the ones the CPU's kernels computed, and another CPU's kernels may differ in the
last bits (``tests/golden/compare.py``: the skeleton of every step compared exactly, its floats with
the tolerance ``torch.testing.assert_close`` gives their dtype).

Memory torch never initialised (``torch.empty``, ``resize_``, the bytes of a storage no tensor covers) holds
whatever was there before, so those values are masked on both sides; everything else must match.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re

import pytest
import torch

from app.engine import EngineLimits, trace_delta
from app.schema import DeltaTrace, RunResult
from app.trace.delta import expand
from tests.golden import Golden, load
from tests.golden.compare import assert_same_step

# Records made with the engine's internals patched to fail (tests of the failure path) are no oracle.
GOLDEN = [g for g in load() if (g.result.get("error") or {}).get("kind") != "internal"]


def _covered(step: dict, sid: str, element_size: int) -> set[int]:
    cells: set[int] = set()
    for fact in step["tensors"].values():
        if fact["storage"] != sid or not fact["stride"] and fact["shape"]:
            continue
        dtype = getattr(torch, fact["dtype"], None)  # torch says its own dtypes' sizes
        size = dtype.itemsize if isinstance(dtype, torch.dtype) else element_size
        if math.prod(fact["shape"]) > 4096:
            return set(range(1 << 16))
        for index in itertools.product(*(range(n) for n in fact["shape"])):
            element = fact["storage_offset"] + sum(i * s for i, s in zip(index, fact["stride"], strict=True))
            first = element * size // element_size
            cells.update(range(first, first + max(size // element_size, 1)))
    return cells


ADDRESS = re.compile(r"0x[0-9a-f]+")
LATER_FIELDS = ("is_conj", "is_neg", "unavailable")  # TensorFact fields added after the recording


def normalised(result: dict, source: str) -> dict:
    result = json.loads(json.dumps(result))
    uninitialised = "empty" in source or "resize_" in source
    if result.get("error"):
        result["error"].pop("output", None)  # added after the recording (what it printed before failing)
        result["error"].pop("code", None)  # the message's id and fields (i18n), added after it too
        result["error"].pop("params", None)
    for step in result["steps"]:
        step["stdout"] = ADDRESS.sub("0x…", step["stdout"])  # printed objects: where they happen to live
        for sid, storage in step["storages"].items():
            if storage["values"] is None:
                continue
            covered = _covered(step, sid, storage["element_size"])
            storage["values"] = [v if i in covered and not uninitialised else None
                                 for i, v in enumerate(storage["values"])]
        for fact in step["tensors"].values():
            for later in LATER_FIELDS:  # not in the golden contract: tested on their own
                fact.pop(later, None)
            if uninitialised:
                fact["values"] = fact["summary"] = None
    return result


def _engine(golden: Golden, full: bool) -> dict:
    """The engine's v1 trace, its forward steps only: the golden traces predate the backward steps
    (issue 13), which a line running backward() now has before its own step."""
    # (max_unrecorded=0: a golden run cut at its limit may be an endless loop; stopped as it was)
    limits = EngineLimits(max_steps=golden.max_steps + 10_000, max_stdout=golden.max_stdout,
                          full_snapshots=full, max_unrecorded=0)
    result = expand(DeltaTrace.model_validate(trace_delta(golden.source, limits))).model_dump()
    forward = [step for step in result["steps"] if step["phase"] == "forward"]
    if golden.result["truncated"]:  # cut where the golden run was cut: at its step limit
        result["truncated"] = len(forward) > golden.max_steps
        forward = forward[: golden.max_steps]
    result["steps"] = forward
    return result


def canonical(result: dict) -> dict:
    """The trace with every id renamed by first reach (see the module docstring)."""
    names: dict[str, str] = {}

    def rename(ident: str | None) -> str | None:
        if ident is None:
            return None
        if ident not in names:
            names[ident] = f"{ident[0]}#{sum(1 for k in names if k[0] == ident[0])}"
        return names[ident]

    steps = []
    for step in result["steps"]:
        queue = [step["variables"][name] for name in sorted(step["variables"])]
        seen: set[str] = set()
        while queue:  # visit in a fixed order, so every id gets its name where it is first reached
            ident = queue.pop(0)
            if ident is None or ident in seen:
                continue
            seen.add(ident)
            rename(ident)
            if ident in step["tensors"]:
                fact = step["tensors"][ident]
                rename(fact["storage"])
                queue += [fact["grad_fn"], fact["grad"], fact["base"]]
            elif ident in step["nodes"]:
                node = step["nodes"][ident]
                queue += [*node["next"], node["variable"], *(node["saved"][k] for k in sorted(node["saved"]))]
        text = json.dumps(step, sort_keys=True)
        steps.append(json.loads(re.sub(r'"([tsn]\d+)"', lambda m: json.dumps(rename(m.group(1))), text)))
    return {**result, "steps": steps}


@pytest.mark.parametrize("full", [False, True], ids=["incremental", "whole"])
@pytest.mark.parametrize("golden", GOLDEN, ids=[g.name for g in GOLDEN])
def test_the_engine_gives_the_golden_v1_trace(golden: Golden, full: bool) -> None:
    want = canonical(normalised(RunResult.model_validate(golden.result).model_dump(), golden.source))
    got = canonical(normalised(_engine(golden, full), golden.source))
    assert {k: v for k, v in got.items() if k != "steps"} == {k: v for k, v in want.items() if k != "steps"}
    assert len(got["steps"]) == len(want["steps"])
    for index, (a, b) in enumerate(zip(got["steps"], want["steps"], strict=True)):
        assert_same_step(a, b, f"step {index} (line {b['line']})")


def test_the_float_kernels_asked_for_are_the_ones_that_run() -> None:
    """scripts/test runs this file again under other kernels: that pass must really use them."""
    asked = os.environ.get("ATEN_CPU_CAPABILITY")
    if not asked:
        pytest.skip("the kernels torch picked for this CPU")
    assert torch.backends.cpu.get_cpu_capability() == asked.upper()
