"""``fmt.scalar`` takes shortcuts (the first form is not formatted twice, exponents are shortened by
replaces): it must write every value as the plain ladder of forms does."""

from __future__ import annotations

import random
import struct

from app.render import fmt


def ladder(value: float) -> str:
    """The rule as stated: the first of .4g, .3g, .2g, .1e that fits six characters (exponents
    written short), else one digit and an exponent."""
    for form in (".4g", ".3g", ".2g", ".1e"):
        text = format(value, form)
        if "e" in text:
            mantissa, _, exponent = text.partition("e")
            sign = "-" if exponent[0] == "-" else ""
            text = f"{mantissa}e{sign}{exponent[1:].lstrip('0') or '0'}"
        if len(text) <= 6:
            return text
    mantissa, _, exponent = f"{value:.0e}".partition("e")
    return f"{mantissa}e{'-' if exponent[0] == '-' else ''}{exponent.lstrip('+-').lstrip('0') or '0'}"


def samples() -> list[float]:
    rng = random.Random(9)
    found = [rng.choice((1, -1)) * 10 ** rng.uniform(-320, 308) for _ in range(4000)]
    found += [rng.choice((1, -1)) * 10 ** rng.uniform(-8, 8) for _ in range(4000)]
    found += [struct.unpack("d", struct.pack("Q", rng.getrandbits(64)))[0] for _ in range(2000)]
    # where rounding carries into the next power, or out of the fixed form into an exponent
    found += [d * 10.0**k for d in (1.5, 9.5, 9.95, 9.995, 9.9995, 9.99995, 1.05, 1.005, 2.5)
              for k in range(-12, 12)]
    found += [9.996e-5, 99950.5, 0.00099995, 5e-324, 1.7e308, 123456.5]
    return [v for v in found + [-v for v in found] if v == v and not float(v).is_integer()]


def test_fractions_read_as_the_ladder_writes_them() -> None:
    wrong = [(v, fmt.scalar(v), ladder(v)) for v in samples() if fmt.scalar(v) != ladder(v)]
    assert not wrong, wrong[:5]


def test_large_whole_floats_take_the_ladder_too() -> None:
    for value in (1e5, -1e5, 123456.0, 9.6378704e24, 1e300, -4.5e17):
        assert fmt.scalar(value) == ladder(value)


def test_the_other_kinds() -> None:
    assert [fmt.scalar(v) for v in (0.0, -0.0, 3.0, -12.0, True, False, 7, 1234567, "NaN", "Infinity",
                                    "-Infinity")] == ["0.", "0.", "3.", "-12.", "T", "F", "7", "1.2e+06",
                                                      "nan", "inf", "-inf"]
    assert fmt.scalar(0.1234) == "0.1234"
    assert fmt.scalar(-0.41152257) == "-0.412"
    assert fmt.scalar(-0.00374341) == "-4e-3"
    assert fmt.scalar(7.583349e-34) == "8e-34"


def test_a_row_of_values_is_each_value_written_long() -> None:
    row = [*samples()[:500], 0.0, -2.0, 3e6, 1e6, 999999.0, float("inf"), 7, True, "NaN"]
    assert fmt.nested(row) == "[" + ", ".join(fmt.long_scalar(v) for v in row) + "]"
    assert fmt.nested([[1.5, 2.0], [3.25, -4.0]]) == "[[1.5, 2.0],\n [3.25, -4.0]]"


def test_leaves_are_the_values_depth_first() -> None:
    import torch

    from app.render.fmt import leaves

    t = torch.arange(24.0).reshape(2, 3, 4)
    assert leaves(t.tolist()) == t.flatten().tolist()
    assert leaves(2.5) == [2.5]
    assert leaves([]) == []
