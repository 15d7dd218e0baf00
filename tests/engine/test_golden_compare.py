"""The golden comparison (``tests/golden/compare.py``) lets through exactly what another CPU's float
kernels change — the last bits of float values, the last printed digit — and nothing else."""

from __future__ import annotations

import copy

import pytest

from tests.golden.compare import assert_same_step

STEP = {
    "line": 3,
    "stdout": "tensor([-1.1258, 0.3223])\n0.9255005121231079\ntorch.Size([2, 3])\n",
    "variables": {"w": "t1", "y": "t2"},
    "tensors": {
        "t1": {"shape": [2], "dtype": "float32", "stride": [1], "version": 0, "values": [0.28285867, -2.5],
               "summary": None, "storage": "s1", "grad_fn": None},
        "t2": {"shape": [2], "dtype": "int64", "stride": [1], "version": 1, "values": [3, 4],
               "summary": {"numel": 2, "min": 3, "max": 4, "mean": 3.5}, "storage": "s2", "grad_fn": "n1"},
    },
    "storages": {"s1": {"dtype": "float32", "nbytes": 8, "values": [0.28285867, -2.5]},
                 "s2": {"dtype": "int64", "nbytes": 16, "values": [3, 4]}},
    "nodes": {"n1": {"name": "MulBackward0", "next": [None], "saved": {}}},
}


def changed(edit) -> dict:  # noqa: ANN001
    step = copy.deepcopy(STEP)
    edit(step)
    return step


def test_a_step_equals_itself() -> None:
    assert_same_step(copy.deepcopy(STEP), STEP, "step")


def test_another_kernels_last_bits_are_the_same_step() -> None:
    def kernels(step: dict) -> None:
        step["tensors"]["t1"]["values"][0] = step["storages"]["s1"]["values"][0] = 0.28285873  # 2 ulp
        step["stdout"] = "tensor([-1.1259, 0.3223])\n0.9255006313323975\ntorch.Size([2, 3])\n"

    assert_same_step(changed(kernels), STEP, "step")


@pytest.mark.parametrize("edit", [
    lambda s: s["tensors"]["t1"]["values"].__setitem__(0, 0.2829),  # a float32 value 4e-5 away
    lambda s: s["tensors"]["t2"]["summary"].__setitem__("mean", 3.5001),  # an int tensor's float64 mean
    lambda s: s["tensors"]["t1"].__setitem__("version", 1),
    lambda s: s["tensors"]["t2"]["values"].__setitem__(1, 5),
    lambda s: s["tensors"].__setitem__("t3", s["tensors"]["t1"]),  # a tensor more
    lambda s: s["tensors"]["t1"].__setitem__("storage", "s2"),  # sharing
    lambda s: s["nodes"]["n1"].__setitem__("next", ["n1"]),  # the graph
    lambda s: s.__setitem__("stdout", s["stdout"].replace("0.9255005", "0.9256005")),
    lambda s: s.__setitem__("stdout", s["stdout"].replace("-1.1258", "-1.1260")),  # two last places
    lambda s: s.__setitem__("stdout", s["stdout"].replace("[2, 3]", "[2, 4]")),  # integers printed
    lambda s: s.__setitem__("stdout", s["stdout"].replace("tensor", "Tensor")),
], ids=["float", "mean", "version", "int value", "extra tensor", "storage", "graph", "printed float",
        "printed digits", "printed int", "printed word"])
def test_anything_else_differs(edit) -> None:  # noqa: ANN001
    with pytest.raises(AssertionError):
        assert_same_step(changed(edit), STEP, "step")
