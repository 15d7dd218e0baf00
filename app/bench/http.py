"""``POST /api/run`` over real HTTP to a real server (``python -m app serve``), default sandbox.

Figures: latency at concurrency 1 (p50, p95), throughput at concurrency 4, the same snippet as a naive
cold ``python -c`` subprocess per request (imports torch each time) for the ratio, and the memory of
the server plus the pool at idle (RSS, and PSS, which splits the pages children share with the fork
server instead of counting them once per process).

The bench server is started with the rate limit lifted (one client sends every request) and no run
cache (each request a real run); everything else is the default configuration. Timing starts once the
server is warm: its standby fork server up (``BenchServer.wait_until_warm``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import httpx
from pydantic import TypeAdapter

from app.bench import Row
from app.bench.cluster_kit import server_timing
from app.bench.snippets import CLONE_DETACH
from app.serving import loopback_socket

ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")
WARM_UP_REQUESTS = 20
SERIAL_REQUESTS = 200
PARALLEL_SECONDS = 8.0
PARALLEL_CLIENTS = 4
COLD_RUNS = 4
COLD = (
    "import sys, json; sys.path.insert(0, {root!r}); from app.engine import trace_snippet; "
    "print(len(json.dumps(trace_snippet(sys.stdin.read()))))"
)


def wait_until_healthy(url: str, process: subprocess.Popen, seconds: float = 180) -> bool:
    """Poll ``url``/healthz until it answers 200 (True), the server exits or ``seconds`` pass (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        if process.poll() is not None:
            return False
        time.sleep(0.2)
    return False


class BenchServer:
    def __init__(self, env: dict[str, str] | None = None) -> None:
        """``env``: settings of the bench's own (``EXPLORER_*``) over the defaults."""
        self.workdir = Path(tempfile.mkdtemp(prefix="explorer-bench-"))
        held = loopback_socket()  # handed to the server (--fd): no other process can take the port
        self.port = held.getsockname()[1]
        env = {
            **os.environ,
            "EXPLORER_DATA_DIR": str(self.workdir / "data"),
            "EXPLORER_RATE_PER_MINUTE": "1000000000",
            "EXPLORER_RATE_BURST": "1000000000",
            # Every request a real run and a real drawing: the run cache would answer the repeated
            # snippets (python -m app.bench cluster measures the cache)
            "EXPLORER_CACHE_MIB": "0",
            **(env or {}),
        }
        self.env = env
        self.log = (self.workdir / "server.log").open("wb")
        with held:
            self.process = subprocess.Popen(
                # As a user starts it (its connection limits, its allocator: app.__main__), not a bare
                # uvicorn that would measure another server.
                [sys.executable, "-m", "app", "serve", "--fd", str(held.fileno())],
                cwd=ROOT,
                env=env,
                stdout=self.log,
                stderr=subprocess.STDOUT,
                pass_fds=(held.fileno(),),
            )
        self.url = f"http://127.0.0.1:{self.port}"
        if not wait_until_healthy(self.url, self.process):
            self.stop()
            raise RuntimeError(f"bench server did not start; see {self.workdir / 'server.log'}")

    def wait_until_warm(self, seconds: float = 180) -> bool:
        """Wait until the sandbox's warm standby fork server is up (``/healthz``: ``pool.standby``), or
        the server says it keeps none. A fork server warming takes a core for seconds (it imports torch
        and runs its warm-ups): a timing taken meanwhile measures the start, not the server."""
        standby = self.env.get("EXPLORER_STANDBY")
        # Read as the server's Settings.standby reads it (pydantic's bool: 0/f/false/n/no/off, any
        # case); a value it refuses would have stopped the server starting.
        if standby is not None and not TypeAdapter(bool).validate_strings(standby):
            return True
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.TransportError, ValueError):
                pool = httpx.get(f"{self.url}/healthz", timeout=2).json().get("pool") or {}
                if pool.get("standby", True):
                    return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _post(client: httpx.Client, url: str, phases: list[dict[str, float]] | None = None) -> float:
    """One run's milliseconds, as the client waited for them; ``phases``: gets the server's own
    account of them (``server_timing``)."""
    started = time.perf_counter()
    response = client.post(url, json={"code": CLONE_DETACH})
    elapsed = time.perf_counter() - started
    if response.status_code != 200 or not response.json()["ok"]:
        raise RuntimeError(f"run failed: {response.status_code} {response.text[:300]}")
    if phases is not None:
        phases.append(server_timing(response))
    return elapsed * 1000


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def serial_latencies(url: str, phases: list[dict[str, float]] | None = None) -> list[float]:
    with httpx.Client(timeout=30) as client:
        for _ in range(WARM_UP_REQUESTS):
            _post(client, url)
        samples = []
        for _ in range(SERIAL_REQUESTS):
            samples.append(_post(client, url, phases))
            time.sleep(0.005)  # a person clicking "run": the pool refills between requests
        return samples


def phase_medians(samples: list[float], phases: list[dict[str, float]]) -> dict[str, float]:
    """Where one request's time went, as the server says (``Server-Timing``), median of each part:
    ``sandbox`` (a child taken, its run, the answer read, validated and checked), ``work`` (what the
    request took after the run: diagnostics, the JSON) and the rest (HTTP both ways, routing, the
    middlewares, the gates, the hops into and out of worker threads, the client)."""
    sandbox = [p.get("sandbox", 0.0) for p in phases]
    work = [p.get("work", 0.0) for p in phases]
    rest = [total - s - w for total, s, w in zip(samples, sandbox, work, strict=True)]
    return {"sandbox": statistics.median(sandbox), "work": statistics.median(work),
            "rest": statistics.median(rest)}


def steady_rate(clients: int, seconds: float, open_client: Callable[[], httpx.Client],
                one_request: Callable[[httpx.Client], object]) -> tuple[float, int]:
    """Requests per second that ``clients`` threads get, each with a client of its own making
    ``one_request`` after the other for ``seconds``; and how many were made."""
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client_loop(index: int) -> None:
        with open_client() as client:
            while time.monotonic() < stop:
                one_request(client)
                done[index] += 1

    started = time.monotonic()
    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = sum(done)
    return total / (time.monotonic() - started), total


def parallel_rate(url: str) -> tuple[float, int]:
    return steady_rate(PARALLEL_CLIENTS, PARALLEL_SECONDS, lambda: httpx.Client(timeout=30),
                       lambda client: _post(client, url))


def cold_latencies() -> list[float]:
    samples = []
    for _ in range(COLD_RUNS):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", COLD.format(root=str(ROOT))],
            input=CLONE_DETACH,
            text=True,
            check=True,
            capture_output=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _memory_kib(pid: int) -> tuple[int, int]:
    rss = pss = 0
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Rss:"):
                rss = int(line.split()[1])
            elif line.startswith("Pss:"):
                pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def _tree(root: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, ppid in parents.items() if ppid in frontier]
        tree += frontier
    return tree


CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu(server_pid: int) -> float:
    """CPU seconds of a server and every process under it, the ones already reaped included: each
    process's own time and what its reaped children took (a child's time moves to its parent's when
    it is reaped, so nothing is counted twice). The fork server reaps its children: their forking,
    set-up, run and exit are all in it. Divided by the runs made between two readings, it is the
    load-independent figure behind runs per second: on a shared machine the rate moves with others'
    load, the CPU a run takes much less so."""
    total = 0
    for pid in _tree(server_pid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += sum(int(value) for value in fields[11:15])  # utime stime cutime cstime
    return total / CLOCK_TICKS


def tree_memory(server_pid: int) -> tuple[float, float, int]:
    """RSS and PSS (MiB) of a server and every process under it, and how many they are."""
    pids = _tree(server_pid)
    rss = pss = 0
    for pid in pids:
        r, p = _memory_kib(pid)
        rss, pss = rss + r, pss + p
    return rss / 1024, pss / 1024, len(pids)


def _with_cpu(server_pid: int, measured: Callable[[], T]) -> tuple[T, float]:
    """``measured()`` and the CPU seconds the server's processes took for it (``tree_cpu``), read
    once the children it used have exited (a child's exit is part of its run's cost)."""
    before = tree_cpu(server_pid)
    result = measured()
    time.sleep(0.5)
    return result, tree_cpu(server_pid) - before


def idle_memory(server_pid: int) -> tuple[float, float, int]:
    time.sleep(1.0)  # the pool is back to its pre-forked children
    return tree_memory(server_pid)


def run() -> list[Row]:
    server = BenchServer()
    try:
        server.wait_until_warm()  # the steady state, not the start
        url = f"{server.url}/api/run"
        phases: list[dict[str, float]] = []
        pid = server.process.pid
        serial, serial_cpu = _with_cpu(pid, lambda: serial_latencies(url, phases))
        (rate, total), parallel_cpu = _with_cpu(pid, lambda: parallel_rate(url))
        rss, pss, processes = idle_memory(pid)
    finally:
        server.stop()
    cold = cold_latencies()
    p50, p95, cold_median = _percentile(serial, 0.5), _percentile(serial, 0.95), statistics.median(cold)
    case1, case4 = "clone/detach, concurrency 1", f"clone/detach, concurrency {PARALLEL_CLIENTS}"
    parts = phase_medians(serial, phases)
    return [
        Row("http", case1, "p50", p50, "ms", 10.0),  # issue 24, 7
        Row("http", case1, "p95", p95, "ms", 40.0),
        Row("http", case1, "median sandbox (Server-Timing: child, run, checks)", parts["sandbox"], "ms"),
        Row("http", case1, "median work (Server-Timing: after the run)", parts["work"], "ms"),
        Row("http", case1, "median rest (HTTP, middlewares, gates, threads, client)", parts["rest"], "ms"),
        Row("http", case1, "CPU per run (server, fork server, children)",
            1000 * serial_cpu / (len(serial) + WARM_UP_REQUESTS), "ms"),
        Row("http", case4, "runs per second", rate, "runs/s"),
        Row("http", case4, "CPU per run (server, fork server, children)", 1000 * parallel_cpu / total, "ms"),
        # "over 100 runs/s" (issue 24, 7), as the upper bound the table knows: at most 10 ms per run
        Row("http", case4, f"time per run ({total} runs)", 1000.0 / rate, "ms", 1000.0 / 100),
        Row("http", "naive cold python -c per request", "median", cold_median, "ms"),
        Row("http", "pool vs cold python -c", "speed-up (cold median / pool p50)", cold_median / p50, "x"),
        # "at least 100x faster", as an upper bound: the pool's p50 is at most 1 % of a cold start
        Row("http", "pool vs cold python -c", "pool p50 / cold median", 100.0 * p50 / cold_median, "%", 1.0),
        Row(
            "http", f"idle: server + fork server + children ({processes} processes)", "RSS (sum)", rss, "MiB"
        ),
        Row(
            "http",
            f"idle: server + fork server + children ({processes} processes)",
            "PSS (shared split)",
            pss,
            "MiB",
        ),
    ]
