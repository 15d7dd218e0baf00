"""The trace engine's own time, in process (no sandbox, no HTTP), producing the delta trace the worker
sends: the small snippet and loop issue 2 set targets for, the real-size runs of issues 9 and 24
(leak ×100 and ×1000, ReLU and tanh leaks, Adam ×100, a small CNN), the backward pass of issue 13 and
the numpy bridge (issue 11: 300 kept arrays, each checked at every step; its 500 ms target is the
leak ×100 one's), and how the engine's cost grows with the graphs a loop keeps, for every op that
saves its own output (issue 24 §6). Wall time counts waiting for a core on a shared machine; CPU
time is the engine's own work — compare CPU figures across runs. One thread, as in the sandbox.

Beside each real-size run (issue 24 §7): the same snippet run plainly in this process (engine /
plain is what watching costs), the CPU of a child forked from a process prepared as the fork server
prepares itself (``fresh_children``: what a sandboxed run pays for every path the fork server has
not warmed), and ``POST /api/run`` through a real server on its defaults (``app.bench.http``)."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

from app.bench import Row
from app.bench.http import BenchServer
from app.bench.snippets import (
    ADAM,
    BATCHNORM_CNN,
    CLONE_DETACH,
    DEEP_BACKWARD,
    KEPT_IN,
    LEAK,
    NUMPY_KEPT,
    SAVES_OUTPUT,
    kept_graphs,
)
from app.engine import EngineLimits, trace_delta
from app.engine.run import prelude
from app.sandbox.launch import fork_server_env

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
FRESH_RUNS = 3  # children forked per scenario (0: no fresh-child rows)
API_RUNS = 3  # requests per scenario through a real server (0: no /api/run rows)
ROOT = Path(__file__).resolve().parents[2]


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
    torch.set_num_threads(1)  # as in the sandbox
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
        *_kept_growth(),
    ]


@dataclass(frozen=True)
class ModelSize:
    """A run at real size; targets in ms (None: informative): the engine's CPU, warm, one thread as in
    the sandbox, and the whole ``POST /api/run`` through a real server."""

    name: str
    source: str
    cpu_ms: float | None
    api_ms: float | None = None


MODEL_SIZE = [
    ModelSize("leak ×100", LEAK.format(n=100), 500.0),  # issue 9's target for the whole request
    ModelSize("leak ×1000", LEAK.format(n=1000), 300.0, 700.0),  # issue 24 §7's table from here on
    ModelSize("ReLU leak ×1000", kept_graphs("relu", 1000), 400.0, 900.0),
    ModelSize("tanh leak ×1000", kept_graphs("tanh", 1000), 400.0, 900.0),
    ModelSize("Adam ×100", ADAM, 360.0, 600.0),
    ModelSize("small CNN, 20 batches of 16", BATCHNORM_CNN, 130.0, 300.0),
    ModelSize("chain ×200 with backward", DEEP_BACKWARD.format(last="loss.backward()"), None),
    ModelSize("numpy arrays kept ×300", NUMPY_KEPT.format(n=300), 500.0),  # issue 11
]


def _plain_cpu(source: str) -> float:
    """CPU milliseconds of ``source`` run plainly (no engine), with the names and seed a run has."""
    namespace = prelude()
    torch.manual_seed(0)
    random.seed(0)
    code = compile(source, "<plain>", "exec")
    cpu = time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        exec(code, namespace)  # noqa: S102 - the bench's own snippets
    return (time.process_time() - cpu) * 1000


def _real_size() -> list[Row]:
    """Per scenario: the engine's CPU and per line, a plain run of the same snippet in this process
    (the ratio is what watching costs), what a freshly forked child pays for the same run (paths the
    fork server did not warm: ``fresh_children``), and ``POST /api/run`` through a real server."""
    fresh = _fresh_children_cpu([scenario.source for scenario in MODEL_SIZE]) if FRESH_RUNS else None
    api = _api_ms([scenario.source for scenario in MODEL_SIZE]) if API_RUNS else None
    rows = []
    for index, scenario in enumerate(MODEL_SIZE):
        wall, cpu, result = min((_timed(scenario.source) for _ in range(REAL_SIZE_RUNS)), key=lambda t: t[1])
        assert result["ok"] and not result["truncated"], result["error"]
        plain = min(_plain_cpu(scenario.source) for _ in range(REAL_SIZE_RUNS))
        lines = len(result["steps"])
        name = f"{scenario.name}, {lines:,} steps (best of {REAL_SIZE_RUNS})"
        rows += [Row("engine", name, "CPU", cpu, "ms", scenario.cpu_ms),
                 Row("engine", name, "CPU per line", cpu * 1000 / lines, "µs"),
                 Row("engine", name, "plain run CPU", plain, "ms"),
                 Row("engine", name, "engine / plain", cpu / max(plain, 1e-3), "×"),
                 Row("engine", name, "wall", wall, "ms"),
                 Row("engine", name, "delta JSON gzipped", len(gzip.compress(_json(result), 6)) / 1e3, "KB")]
        if fresh is not None:
            rows.append(Row("engine", name, f"fresh child CPU (median of {FRESH_RUNS})",
                            statistics.median(fresh[index]), "ms"))
        if api is not None:
            rows.append(Row("engine", name, f"/api/run (median of {API_RUNS})", statistics.median(api[index]),
                            "ms", scenario.api_ms))
    return rows


FRESH = "import sys; sys.path.insert(0, {root!r}); import app.bench.engine as bench; bench.fresh_children()"


def _fresh_children_cpu(sources: list[str]) -> list[list[float]]:
    """CPU milliseconds of each source's run in children forked from a process prepared as the fork
    server prepares itself, in its environment (``FRESH_RUNS`` children each)."""
    done = subprocess.run([sys.executable, "-c", FRESH.format(root=str(ROOT))], input=json.dumps(sources),
                          capture_output=True, text=True, check=True, env=fork_server_env(), cwd=ROOT)
    return json.loads(done.stdout.splitlines()[-1])


def fresh_children() -> None:
    """(In its own process.) Prepare as the fork server does, then run each source of the JSON list
    on stdin in ``FRESH_RUNS`` forked children, each after a child's own warm-up, as a sandbox child
    runs it; print each one's CPU milliseconds as JSON."""
    from app.sandbox.child import CHILD_WARM_UP, warm_up
    from app.sandbox.forkserver import prepare

    sources = json.loads(sys.stdin.read())
    prepare()
    found = []
    for source in sources:
        samples = []
        for _ in range(FRESH_RUNS):
            read, write = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    os.close(read)
                    warm_up(CHILD_WARM_UP)
                    cpu = time.process_time()
                    trace_delta(source, EngineLimits())
                    os.write(write, str((time.process_time() - cpu) * 1000).encode())
                finally:
                    os._exit(0)
            os.close(write)
            with os.fdopen(read) as answer:
                samples.append(float(answer.read()))
            os.waitpid(pid, 0)
        found.append(samples)
    print(json.dumps(found))


def _api_ms(sources: list[str]) -> list[list[float]]:
    """Milliseconds of ``POST /api/run`` (the delta format) per source, through a real server on its
    defaults once its standby fork server is up, after one run each to warm the server's own paths."""
    server = BenchServer()
    try:
        # the steady state, not the start: a standby fork server warming takes a core for seconds, and
        # the first scenarios' requests would wait for it (leak ×1000: ≈ 600 ms then, ≈ 420 ms warm)
        server.wait_until_warm()
        found = []
        with httpx.Client(timeout=120) as client:
            for source in sources:
                samples = []
                for attempt in range(API_RUNS + 1):
                    started = time.perf_counter()
                    response = client.post(f"{server.url}/api/run", json={"code": source, "format": "delta"})
                    elapsed = (time.perf_counter() - started) * 1000
                    body = response.json()
                    if response.status_code != 200 or not body["ok"] or body["truncated"]:
                        raise RuntimeError(f"run failed: {response.status_code} {response.text[:300]}")
                    if attempt:
                        samples.append(elapsed)
                found.append(samples)
        return found
    finally:
        server.stop()


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


KEPT_SMALL, KEPT_LARGE = 200, 800
GROWTH = 1.3  # per-line CPU at KEPT_LARGE over KEPT_SMALL: 1 when linear, up to 4 when quadratic


def _kept_growth() -> list[Row]:
    """Issue 24 §6: a loop that keeps every graph it makes costs per line what the line changed, not
    what the earlier iterations keep — for every op that saves its own output, with and without a
    backward pass, (relu) in every container and loop form, and (tanh) in every container."""
    cases = [(op, "list", "for", backward) for op in SAVES_OUTPUT for backward in (False, True)]
    cases += [("relu", keep, loop, False) for keep in KEPT_IN for loop in ("for", "while")
              if (keep, loop) != ("list", "for")]
    cases += [("tanh", keep, "for", False) for keep in KEPT_IN if keep != "list"]
    rows = []
    for op, keep, loop, backward in cases:
        per_line = []
        for n in (KEPT_SMALL, KEPT_LARGE):
            source = kept_graphs(op, n, keep, loop, backward)
            # Best of 2 on both sides: one run alone can take a full collection or a busy core the
            # other did not (a single ×800 run read 1.40× where repeated runs read 1.0×)
            _, cpu, result = min((_timed(source) for _ in range(2)), key=lambda t: t[1])
            assert result["ok"] and not result["truncated"], result["error"]
            per_line.append(cpu * 1000 / len(result["steps"]))
        name = f"kept {op} graphs ({keep}, {loop} loop{', backward' if backward else ''})"
        growth = per_line[1] / per_line[0]
        rows += [Row("engine", name, f"CPU per line at ×{KEPT_LARGE}", per_line[1], "µs"),
                 Row("engine", name, f"per line ×{KEPT_LARGE} / ×{KEPT_SMALL}", growth, "×", GROWTH)]
    return rows
