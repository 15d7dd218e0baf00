"""Benchmarks: ``python -m app.bench [NAME ...]``.

Each sub-benchmark is a module ``app.bench.<name>`` with ``run() -> list[Row]``; ``__main__`` lists
them and prints one table. ``Row`` and ``render`` live here so every sub-benchmark shares them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    bench: str
    case: str
    metric: str
    value: float
    unit: str
    target: float | None = None  # upper bound; None when the figure is only informative

    @property
    def met(self) -> bool | None:
        return None if self.target is None else self.value <= self.target


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def render(rows: list[Row]) -> str:
    header = ("bench", "case", "metric", "value", "target", "ok")
    body = [
        (
            r.bench, r.case, r.metric, f"{_number(r.value)} {r.unit}",
            "" if r.target is None else f"≤ {_number(r.target)} {r.unit}",
            {None: "", True: "yes", False: "MISSED"}[r.met],
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
             for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
