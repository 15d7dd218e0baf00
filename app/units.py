"""Byte counts as the explorer writes them, everywhere: the memory strips and notices (``nbytes``), the
diagnostics and the memory chart (``fmt_bytes``). One ladder of units (``byte_unit``), below both the
rules and the views, so that a figure in a finding reads exactly as the chart beside it writes it."""

from __future__ import annotations

from app.i18n import decimal, number
from app.i18n import gettext as _

UNITS = ("KiB", "MiB", "GiB")


def byte_unit(count: int) -> tuple[float, str]:
    """The one unit ladder of every byte count the explorer writes (memory strips, notices, the
    diagnostics, the memory chart): bytes, then KiB below 1 MiB, MiB below 1 GiB, then GiB. Never
    "3072.0 KiB" in one place and "3.0 MiB" in another."""
    if count < 1024:
        return float(count), "B"
    value = count / 1024
    for unit in UNITS[:-1]:
        if round(value, 1) < 1024:  # as written: 1,048,575 bytes is "1.0 MiB", not "1024.0 KiB"
            return value, unit
        value /= 1024
    return value, UNITS[-1]


def nbytes(count: int) -> str:
    """``24 B``, ``3.9 KiB``, ``3.0 MiB``: one decimal from KiB up (a cell, a label)."""
    value, unit = byte_unit(count)
    return f"{count} B" if unit == "B" else f"{value:.1f} {unit}"


def fmt_bytes(n: int) -> str:
    """``1,234 bytes`` below 10 KiB (exact, in a sentence), else ``byte_unit`` with one decimal, in
    the request's language."""
    if n < 10 * 1024:
        return _("{n} bytes").format(n=number(n))
    value, unit = byte_unit(n)
    return f"{decimal(value)} {unit}"
