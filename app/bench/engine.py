"""The trace engine's own time, in process (no sandbox, no HTTP), producing the delta trace the worker
sends: the small snippet and loop issue 2 set targets for, the real-size runs of issue 9 (leak ×100
and ×1000, Adam ×100), the backward pass of issue 13 and the numpy bridge (issue 11: 300 kept
arrays, each checked at every step; its 500 ms target is the leak ×100 one's). Wall time counts
waiting for a core on a shared machine; CPU time is the engine's own work — compare CPU figures
across runs."""

from __future__ import annotations

import gzip
import json
import statistics
import time

from app.bench import Row
from app.bench.snippets import ADAM, DEEP_BACKWARD, LEAK, NUMPY_KEPT
from app.engine import EngineLimits, trace_delta

CLONE_DETACH = """\
x = torch.ones(3, requires_grad=True)
y = x.clone()
z = x.detach()
w = x.clone().detach()
v = x.detach().clone()
z.add_(1)
"""

TRAINING_LOOP = """\
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 4)
y = torch.randn(16, 1)
for epoch in range(100):
    opt.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
"""

SMALL_RUNS = 60
LOOP_RUNS = 5
REAL_SIZE_RUNS = 3


def _timed(source: str) -> tuple[float, float, dict]:
    """Wall and CPU milliseconds of one run, and its result. On a shared machine the wall time also
    counts waiting for a core; the CPU time is the engine's own work either way."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = trace_delta(source, EngineLimits())
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000, result


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def _json(result: dict) -> bytes:
    # The same encoding the worker sends: strict JSON, compact separators.
    return json.dumps(result, allow_nan=False, separators=(",", ":")).encode()


def run() -> list[Row]:
    for _ in range(3):  # warm up: first calls pay for lazy imports and torch's dispatcher caches
        _timed(CLONE_DETACH)
    small = [_timed(CLONE_DETACH)[0] for _ in range(SMALL_RUNS)]

    _timed(TRAINING_LOOP)
    loop_times, loop_cpu, results = zip(*(_timed(TRAINING_LOOP) for _ in range(LOOP_RUNS)), strict=True)
    result = results[-1]
    assert result["ok"] and not result["truncated"], result["error"]
    encoded = _json(result)

    case_small = f"clone/detach, 6 lines ({SMALL_RUNS} runs)"
    case_loop = f"MLP training loop, {len(result['steps'])} steps ({LOOP_RUNS} runs)"
    return [
        Row("engine", case_small, "median", statistics.median(small), "ms", 5.0),
        Row("engine", case_small, "p95", _p95(small), "ms"),
        Row("engine", case_loop, "median", statistics.median(loop_times), "ms", 500.0),
        Row("engine", case_loop, "max", max(loop_times), "ms"),
        Row("engine", case_loop, "median CPU", statistics.median(loop_cpu), "ms"),
        Row("engine", case_loop, "JSON size", len(encoded) / 1e6, "MB", 3.0),
        # What a browser would download from a server that compresses responses.
        Row("engine", case_loop, "JSON gzipped", len(gzip.compress(encoded, 6)) / 1e6, "MB"),
        *_real_size(),
        *_backward(),
    ]


def _real_size() -> list[Row]:
    rows = []
    # the targets are issue 9's for the whole request (/api/run, server): the engine is a part of it
    for case, source, cpu_target in (("leak ×100", LEAK.format(n=100), 500.0),
                                     ("leak ×1000", LEAK.format(n=1000), 2000.0),
                                     ("Adam ×100", ADAM, 1500.0),
                                     ("numpy arrays kept ×300", NUMPY_KEPT.format(n=300), 500.0)):
        wall, cpu, result = min((_timed(source) for _ in range(REAL_SIZE_RUNS)), key=lambda t: t[1])
        assert result["ok"] and not result["truncated"], result["error"]
        name = f"{case}, {len(result['steps']):,} steps (best of {REAL_SIZE_RUNS})"
        rows += [Row("engine", name, "CPU", cpu, "ms", cpu_target), Row("engine", name, "wall", wall, "ms"),
                 Row("engine", name, "delta JSON gzipped", len(gzip.compress(_json(result), 6)) / 1e3, "KB")]
    return rows


def _backward() -> list[Row]:
    """The same run with and without ``loss.backward()``: the difference is what the pass costs."""
    with_pass = DEEP_BACKWARD.format(last="loss.backward()")
    without = DEEP_BACKWARD.format(last="pass")
    cpu_with = min(_timed(with_pass)[1] for _ in range(REAL_SIZE_RUNS))
    cpu_without = min(_timed(without)[1] for _ in range(REAL_SIZE_RUNS))
    result = _timed(with_pass)[2]
    nodes = sum(1 for step in result["steps"] if step.get("phase") == "backward")
    name = f"backward of a {nodes}-node graph (best of {REAL_SIZE_RUNS})"
    return [Row("engine", name, "added CPU", cpu_with - cpu_without, "ms", 100.0)]
