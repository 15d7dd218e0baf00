"""``python -m app.bench``: the engine benchmark runs, and the runner skips benchmarks not written yet."""

from __future__ import annotations

import pytest

import app.bench.__main__ as bench_main
import app.bench.engine as engine_bench
from app.bench import Row, render
from app.bench.snippets import KEPT_IN, SAVES_OUTPUT


def test_the_engine_benchmark_measures_both_cases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_bench, "SMALL_RUNS", 3)
    monkeypatch.setattr(engine_bench, "LOOP_RUNS", 1)
    monkeypatch.setattr(engine_bench, "REAL_SIZE_RUNS", 1)
    # the real-size rows on the small CNN alone (the fresh child too), without a server; the growth
    # rows on short loops
    cnn = next(s for s in engine_bench.MODEL_SIZE if s.name.startswith("small CNN"))
    monkeypatch.setattr(engine_bench, "MODEL_SIZE", [cnn])
    monkeypatch.setattr(engine_bench, "FRESH_RUNS", 1)
    monkeypatch.setattr(engine_bench, "API_RUNS", 0)
    monkeypatch.setattr(engine_bench, "KEPT_SMALL", 3)
    monkeypatch.setattr(engine_bench, "KEPT_LARGE", 6)
    rows = engine_bench.run()
    metrics = {(row.case.split(",")[0], row.metric): row for row in rows}
    assert metrics[("clone/detach", "median")].target == 5.0
    assert metrics[("MLP training loop", "median")].target == 500.0
    assert metrics[("MLP training loop", "JSON size")].value > 0
    assert "505 steps" in metrics[("MLP training loop", "median")].case
    assert metrics[("small CNN", "CPU")].target == 130.0
    assert metrics[("small CNN", "plain run CPU")].value > 0
    engine_cpu, plain = metrics[("small CNN", "CPU")].value, metrics[("small CNN", "plain run CPU")].value
    assert metrics[("small CNN", "engine / plain")].value == pytest.approx(engine_cpu / plain)
    assert metrics[("small CNN", "fresh child CPU (median of 1)")].value > 0
    assert not any("/api/run" in row.metric for row in rows)
    growth = [row for row in rows if row.case.startswith("kept ") and row.target is not None]
    # every op, with and without backward; relu's containers and loop forms (the list's for loop is the
    # first); tanh's containers (the list's is the first)
    assert len(growth) == 2 * len(SAVES_OUTPUT) + 2 * len(KEPT_IN) - 1 + len(KEPT_IN) - 1
    table = render(rows)
    assert "clone/detach" in table and "MLP training loop" in table


def test_a_registered_benchmark_that_does_not_exist_yet_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_main, "BENCHMARKS", ["not_written_yet"])
    assert bench_main._load("not_written_yet") is None
    assert bench_main.main([]) == 0


def test_an_unknown_benchmark_name_is_an_error() -> None:
    assert bench_main.main(["nope"]) == 2


def test_a_missed_target_fails_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    class Slow:
        @staticmethod
        def run() -> list[Row]:
            return [Row("slow", "case", "median", 9.0, "ms", 5.0)]

    monkeypatch.setattr(bench_main, "BENCHMARKS", ["slow"])
    monkeypatch.setattr(bench_main, "_load", lambda name: Slow)
    assert bench_main.main([]) == 1
    assert "MISSED" in render(Slow.run())
