"""Short, stable text for numbers, shapes and sizes."""

from __future__ import annotations

from typing import Any

from app.units import byte_unit, nbytes  # noqa: F401 - the views' byte units live below them


def scalar(value: Any) -> str:
    """A value that fits a memory cell: at most about six characters."""
    if type(value) is float and value != 0 and not value.is_integer():
        # the common case, first: a fraction that four significant digits write short enough (what the
        # ladder below tries first too); every memory cell is one, and optimizer state is mostly
        # exponents, so the first form is not formatted twice
        text = f"{value:.4g}"
        if "e" in text:
            text = _shorten(text)
        if len(text) <= 6:
            return text
        return _ladder(value, (".3g", ".2g", ".1e"))
    if isinstance(value, bool):
        return "T" if value else "F"
    if isinstance(value, int):
        text = str(value)
        return text if len(text) <= 6 else f"{value:.1e}"
    if isinstance(value, float):
        if value == 0:
            return "0."
        if value.is_integer() and abs(value) < 1e5:
            return f"{int(value)}."
        return _ladder(value, (".4g", ".3g", ".2g", ".1e"))
    if value == "NaN":
        return "nan"
    if value == "Infinity":
        return "inf"
    if value == "-Infinity":
        return "-inf"
    return str(value)[:6]


def _ladder(value: float, forms: tuple[str, ...]) -> str:
    """The first of ``forms`` that writes ``value`` in six characters, else one digit and an exponent."""
    for form in forms:
        text = format(value, form)
        if "e" in text:
            text = _shorten(text)
        if len(text) <= 6:
            return text
    return _shorten(f"{value:.0e}")


def _shorten(text: str) -> str:
    """``4.3e-05`` -> ``4.3e-5``: a cell is six characters wide. For a number Python wrote (its
    exponent is signed, with at least two digits: ``e-05`` → ``e-5``, ``e+24`` → ``e24``, ``e+00`` →
    ``e0``), in three C-level replaces."""
    return text.replace("e-0", "e-").replace("e+0", "e").replace("e+", "e")


def _long_float(value: float) -> str:
    return f"{value:.6g}" if not value.is_integer() or abs(value) >= 1e6 else f"{value:.1f}"


def long_scalar(value: Any) -> str:
    if isinstance(value, float):  # the common case, first (a bool is never a float)
        return _long_float(value)
    if isinstance(value, bool):
        return str(value)
    return scalar(value) if isinstance(value, str) else str(value)


def shape(dims: list[int] | tuple[int, ...]) -> str:
    """``(2, 3)``; a 0-dim tensor is ``()``; a 1-dim one ``(3,)`` as Python writes it."""
    if len(dims) == 1:
        return f"({dims[0]},)"
    return "(" + ", ".join(map(str, dims)) + ")"


def leaves(values: Any) -> list[Any]:
    """The scalars of nested value lists, depth first, left to right (a scalar: itself alone)."""
    if not isinstance(values, list):
        return [values]
    found: list[Any] = []
    for item in values:
        if isinstance(item, list):
            found.extend(leaves(item))
        else:
            found.append(item)
    return found


def nested(values: Any, indent: int = 0) -> str:
    """Nested lists as torch prints them: one row per line, aligned."""
    if not isinstance(values, list):
        return long_scalar(values)
    if not values or not isinstance(values[0], list):
        # long_scalar's float case first: this writes every element of every small tensor's values
        return "[" + ", ".join([_long_float(v) if type(v) is float else long_scalar(v) for v in values]) + "]"
    pad = " " * (indent + 1)
    rows = [nested(row, indent + 1) for row in values]
    return "[" + (",\n" + pad).join(rows) + "]"
