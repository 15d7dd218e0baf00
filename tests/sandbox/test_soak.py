"""A short soak (``app.bench.soak``, the full one is ``python -m app.bench soak``): a mixed flood at
concurrency 8 against ``python -m app serve`` gets no 5xx and drops no connection, the server comes
back after its fork server is killed, and a benign run then matches torch. Timing and memory targets
are the benchmark's; here only what must always hold."""

from __future__ import annotations

from app.bench.soak import soak


def test_a_short_soak_keeps_serving() -> None:
    report = soak(requests=160, concurrency=8)
    assert report.served == 160
    assert report.server_errors == [], report.server_errors[:10]
    assert report.failed_after_kill == 0
    assert report.matches_torch
