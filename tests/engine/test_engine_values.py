"""Tensor values in the JSON: exact, short, and valid strict JSON even for NaN and infinities."""

from __future__ import annotations

import json
import math
import struct

import pytest
import torch
from torch_oracle import decode, fact, run_plain, trace

from app.engine.values import ValueWriter, float32_values, shortest_float32


def test_non_finite_values_survive_strict_json() -> None:
    source = """\
x = torch.tensor([float('nan'), float('inf'), -float('inf'), -0.0, 1.5])
y = torch.tensor([float('nan'), 2.0], dtype=torch.float64)
big = torch.full((100,), float('inf'))
"""
    result = trace(source)
    text = json.dumps(result, allow_nan=False)  # raises on a bare NaN or inf
    step = json.loads(text)["steps"][-1]
    assert fact(step, "x")["values"] == ["NaN", "Infinity", "-Infinity", -0.0, 1.5]
    assert math.copysign(1.0, fact(step, "x")["values"][3]) == -1.0  # the sign of zero is kept
    assert fact(step, "y")["values"] == ["NaN", 2.0]
    assert fact(step, "big")["values"] is None
    infinite = {"numel": 100, "min": "Infinity", "max": "Infinity", "mean": "Infinity"}
    assert fact(step, "big")["summary"] == infinite


def test_float32_values_are_short_and_exact() -> None:
    step = trace("x = torch.tensor([0.1, 1/3, 2.5, 1e-8, 3.4e38])\n")["steps"][-1]
    values = fact(step, "x")["values"]
    assert values == [0.1, 0.33333334, 2.5, 1e-08, 3.4e38]
    expected = torch.tensor([0.1, 1 / 3, 2.5, 1e-8, 3.4e38])
    assert torch.equal(torch.tensor(values, dtype=torch.float32), expected)


def test_shortest_float32_round_trips_every_value() -> None:
    gen = torch.Generator().manual_seed(1)
    samples = torch.cat([
        torch.randn(2000, generator=gen),
        torch.randn(500, generator=gen) * 1e-30,
        torch.randn(500, generator=gen) * 1e30,
        torch.tensor([1e-45, 3.4028235e38, -3.4028235e38, 16777217.0, 0.1, 0.7]),
    ]).tolist()
    pack = struct.Struct("<f")
    for value in samples:
        short = shortest_float32(value)
        assert pack.unpack(pack.pack(short))[0] == value
        assert len(repr(short)) <= len(repr(value))


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.int64, [0, 1, 2]),
        (torch.bool, [False, True, True]),
        (torch.float64, [0.0, 1.0, 2.0]),
        (torch.float16, [0.0, 1.0, 2.0]),
    ],
)
def test_other_dtypes(dtype: torch.dtype, expected: list) -> None:
    step = trace(f"x = torch.arange(3).to({dtype})\n")["steps"][-1]
    assert fact(step, "x")["values"] == expected
    assert fact(step, "x")["dtype"] == str(dtype).removeprefix("torch.")


def test_large_tensors_get_a_summary_instead_of_values() -> None:
    step = trace("x = torch.randn(10, 10)\n")["steps"][-1]
    torch.manual_seed(0)
    expected = torch.randn(10, 10)
    x = fact(step, "x")
    assert x["values"] is None
    assert x["summary"]["numel"] == 100
    for key in ("min", "max", "mean"):
        assert torch.tensor(x["summary"][key]) == getattr(expected, key)()
    assert step["storages"][x["storage"]]["values"] is None


def test_storage_values_are_in_memory_order_whatever_the_view() -> None:
    source = """\
m = torch.arange(6.0).reshape(2, 3)
t = m.t()
"""
    step = trace(source)["steps"][-1]
    t = fact(step, "t")
    assert t["values"] == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    storage = step["storages"][t["storage"]]
    assert storage == {"nbytes": 24, "element_size": 4, "dtype": "float32",
                       "values": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}


def test_a_slice_reads_its_own_elements_of_a_shared_storage() -> None:
    step = trace("a = torch.arange(8.0)\nb = a[3:6]\nc = a.view(2, 4)[1]\n")["steps"][-1]
    assert fact(step, "b")["values"] == [3.0, 4.0, 5.0]
    assert fact(step, "c")["values"] == [4.0, 5.0, 6.0, 7.0]


def test_a_reinterpreting_view_reads_with_its_own_dtype() -> None:
    step = trace("a = torch.ones(2)\nb = a.view(torch.int32)\n")["steps"][-1]
    assert fact(step, "b")["values"] == torch.ones(2).view(torch.int32).tolist()
    assert fact(step, "a")["values"] == [1.0, 1.0]


@pytest.mark.parametrize(
    "source",
    [
        "z = torch.tensor([1 + 2j, -1j])\nc = z.conj()\nn = c.imag\n",
        # The conjugate view is met first: its storage still shows the memory, not the lazy flip.
        "c = torch.tensor([1 - 2j, 1j]).conj()\nz = c.conj()\nn = c.imag\n",
    ],
)
def test_complex_values_are_strings_and_a_conjugate_view_shares_raw_memory(source: str) -> None:
    step = trace(source)["steps"][-1]
    plain = run_plain(source).namespace
    for name in ("z", "c"):
        assert fact(step, name)["values"] == [str(v) for v in plain[name].tolist()]
    assert fact(step, "n")["values"] == plain["n"].tolist()
    raw = plain["z"] if not plain["z"].is_conj() else plain["c"]
    assert step["storages"][fact(step, "c")["storage"]]["values"] == [str(v) for v in raw.tolist()]


def test_zero_signs_and_non_finite_values_in_a_float32_array() -> None:
    writer = ValueWriter()
    assert writer.flat([0.0, -0.0, math.nan], torch.float32) == [0.0, -0.0, "NaN"]
    for values in ([-0.0, 0.0], [-0.0, 0.0, math.inf]):  # orjson's path, and the one for non-finite
        again = writer.flat(values, torch.float32)
        assert [math.copysign(1, v) for v in again[:2]] == [-1, 1]
    assert decode(writer.flat([math.inf, -math.inf], torch.float32)) == [math.inf, -math.inf]
    assert writer.flat([], torch.float32) == []


def test_float32_arrays_are_written_as_numpy_writes_each_value() -> None:
    """orjson's Ryu and numpy's Dragon4 give the same shortest digits (checked here on random bit
    patterns, a stride through every subnormal, and the values around 1; all 9.4 million subnormals
    and small normals agreed when the path was written)."""
    gen = torch.Generator().manual_seed(3)
    random_bits = torch.randint(-(2**31), 2**31 - 1, (100_000,), generator=gen, dtype=torch.int32)
    subnormals = torch.arange(1, 2**23, 83, dtype=torch.int32)
    near_one = torch.arange(0x3F800000 - 50_000, 0x3F800000 + 50_000, dtype=torch.int32)
    values = torch.cat([random_bits, subnormals, near_one]).view(torch.float32)
    values = values[values.isfinite()].tolist()
    written = float32_values(values)
    expected = [shortest_float32(v) for v in values]
    assert written == expected
    assert [math.copysign(1, v) for v in written] == [math.copysign(1, v) for v in expected]


def test_float32_values_read_from_memory_match_torch_in_every_layout() -> None:
    """Small float32 tensors are read from their memory (``values._float32_memory``); what a layout
    makes of that memory, torch's ``tolist`` says: views at an offset, transposed, expanded, a
    negative view, one that requires grad, NaN among them, a scalar, an empty one."""
    source = """\
m = torch.randn(4, 16)
row = m[2]
col = m[:, 3]
t = m[:2, :4].t()
e = torch.randn(3, 1).expand(3, 5)
n = torch._neg_view(torch.randn(6))
w = torch.randn(8, requires_grad=True)
y = w * 2
h = torch.tensor([1.5, float('nan'), -0.0, float('inf')])
s = torch.tensor(0.1)
z = torch.empty(0, 3)
"""
    step = trace(source)["steps"][-1]
    plain = run_plain(source).namespace
    for name in ("m", "row", "col", "t", "e", "n", "w", "y", "h", "s", "z"):
        expected = plain[name].detach().resolve_neg()
        read = torch.tensor(decode(fact(step, name)["values"]), dtype=torch.float32).reshape(expected.shape)
        torch.testing.assert_close(read, expected, rtol=0, atol=0, equal_nan=True, msg=name)
    assert math.copysign(1, fact(step, "h")["values"][2]) == -1  # the sign of zero is kept
    memory = step["storages"][fact(step, "n")["storage"]]["values"]  # the unflipped numbers
    assert torch.equal(torch.tensor(memory, dtype=torch.float32), -plain["n"].resolve_neg())
