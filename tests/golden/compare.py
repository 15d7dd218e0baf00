"""What "the same trace" means when one side was recorded on another CPU.

torch picks its float kernels by what the CPU offers (``ATEN_CPU_CAPABILITY``: default, avx2,
avx512 on x86-64); a matmul, a reduction or a fused optimizer step sums in another order under
each, so a float result may differ in its last bits from one machine to the next. Nothing else
does: which tensors exist, their names, shapes, strides, offsets, dtypes, versions, the graph, who
shares which storage, integers, booleans and every word printed are the same everywhere.

So a golden step is compared in two parts:

* its **skeleton** — the step with every float of a floating-point fact (and every decimal number
  printed) replaced by a placeholder — exactly;
* the **floats** themselves, per dtype, with the tolerance torch's own test suite uses to compare
  float results across kernels and devices: ``torch.testing.assert_close``'s defaults for that dtype
  (float32: rtol 1.3e-6, atol 1e-5), torch being the oracle of what "equal" means for its kernels.

A printed decimal may also differ in its last printed digit (a value a few bits away rounds the
other way), so each is allowed one unit there on top of float32's tolerance: printed text does not
say its dtype, and float32 is the widest the snippets print.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import torch

FLOAT_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
                "float64": torch.float64, "complex64": torch.complex64, "complex128": torch.complex128}
# A fact whose dtype is not a float one may still carry a float (the mean of an integer tensor):
# computed in float64, compared as float64.
OTHER = torch.float64
PLACEHOLDER = "<float>"
# A decimal number in printed text: digits with a point or an exponent, not part of a name (t5, x2).
DECIMAL = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+(?=[eE]))(?:[eE][-+]?\d+)?(?![\w.])")
PRINTED_RTOL, PRINTED_ATOL = 1.3e-6, 1e-5  # assert_close's float32 defaults


@dataclass
class Split:
    """A step cut into its exact skeleton and its floats, grouped by the dtype that bounds them."""

    skeleton: Any = None
    floats: dict[torch.dtype, list[tuple[str, float]]] = field(default_factory=dict)
    printed: list[tuple[str, str]] = field(default_factory=list)  # (where, the number as printed)


def split(step: dict) -> Split:
    out = Split()

    def walk(value: Any, dtype: torch.dtype | None, where: str) -> Any:
        if isinstance(value, dict):
            own = value.get("dtype")
            if isinstance(own, str):
                dtype = FLOAT_DTYPES.get(own, OTHER)
            # keys in order: the floats of both sides line up whatever order their dicts were built in
            return {key: walk(value[key], dtype, f"{where}/{key}") for key in sorted(value)}
        if isinstance(value, list):
            return [walk(item, dtype, f"{where}[{index}]") for index, item in enumerate(value)]
        if isinstance(value, float) and dtype is not None and math.isfinite(value):
            out.floats.setdefault(dtype, []).append((where, value))
            return PLACEHOLDER
        return value

    text = step.get("stdout", "")
    out.printed = [("stdout", match.group()) for match in DECIMAL.finditer(text)]
    out.skeleton = walk({**step, "stdout": DECIMAL.sub(PLACEHOLDER, text)}, None, "")
    return out


def _last_place(printed: str) -> float:
    """One unit in the last digit ``printed`` shows: 1e-4 for ``-1.1258``, 1e-4 for ``1.2e-03``."""
    mantissa, _, exponent = printed.lower().partition("e")
    whole, point, decimals = mantissa.partition(".")
    if point and not decimals:
        return 0.0  # torch prints "1." only for a whole number: a value bits away would show decimals
    return 10.0 ** (int(exponent or 0) - len(decimals))


def assert_same_step(got: dict, want: dict, where: str) -> None:
    """``got`` is ``want`` up to what the CPU's float kernels may change (see the module docstring)."""
    a, b = split(got), split(want)
    assert a.skeleton == b.skeleton, f"{where}: differs beyond float values"
    assert a.floats.keys() == b.floats.keys(), f"{where}: float dtypes differ"
    for dtype, values in b.floats.items():
        mine = a.floats[dtype]
        assert [w for w, _ in mine] == [w for w, _ in values], f"{where}: floats in other places"
        torch.testing.assert_close(
            torch.tensor([v for _, v in mine], dtype=dtype),
            torch.tensor([v for _, v in values], dtype=dtype),
            msg=lambda text, dtype=dtype: f"{where}: {dtype} values differ beyond its tolerance\n{text}")
    assert len(a.printed) == len(b.printed), f"{where}: printed output differs"
    for (_, mine), (_, theirs) in zip(a.printed, b.printed, strict=True):
        value, expected = float(mine), float(theirs)
        slack = PRINTED_ATOL + PRINTED_RTOL * abs(expected) + max(_last_place(mine), _last_place(theirs))
        assert abs(value - expected) <= slack, f"{where}: printed {mine}, recorded {theirs}"
