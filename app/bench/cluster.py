"""``python -m app.bench cluster``: replicas behind HAProxy on this machine (``app.bench.cluster_kit``:
Debian's redis-server and haproxy, two ``python -m app serve`` with the real sandbox, Redis for the
rate and the run cache).

* Throughput of one replica and of two behind the proxy: ``CLIENTS`` clients post runs for
  ``SECONDS``, each run a code never run before (so the cache answers none: every run is sandboxed).
  One replica is the same proxy with the other in maintenance. The machine's cores bound both: two
  replicas on one machine share them.
* A docs page's load: what a page with three autorun embeds and two README pictures asks the server
  (``POST /embed/run`` per frame, ``GET /render.svg`` per picture, at once, as a browser does),
  through the proxy. Uncached: codes never run; then the same page twice more: the second load's
  requests mostly reach the replica that did not run them (their traces from Redis, drawn there),
  the third's one that drew them already (its kept drawings: no run, no drawing).

Each figure is the median of ``REPEATS`` rounds (the range beside it). The bench's clients lift the
rate limit (one client sends every request); the replicas keep the default admission (2 runs at
once) and no standby fork server.
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

from app.bench import Row
from app.bench.cluster_kit import Cluster, Missing, Redis, client, server_timing
from app.bench.http import steady_rate, tree_memory
from app.web.permalink import encode_code

CLIENTS = 4
SECONDS = 8.0
REPEATS = 3
SETTINGS = {"EXPLORER_MAX_RUNNING": "2", "EXPLORER_PREFORK": "2",
            "EXPLORER_RATE_PER_MINUTE": "1000000000", "EXPLORER_RATE_BURST": "1000000000"}
# A docs page: three snippets in frames, two pictures (gallery-sized: a few tensors, a backward).
FRAMES = (
    "import torch\nw = torch.randn(3, requires_grad=True)\nx = w * 2\ny = x.sum()\ny.backward()\n",
    "import torch\na = torch.randn(2, 3, requires_grad=True)\nb = a.clone()\nc = a.detach()\nc.add_(1)\n",
    "import torch\nlosses = []\nw = torch.randn(3, requires_grad=True)\nfor i in range(10):\n"
    "    loss = (w * i).sum()\n    losses.append(loss)\n",
)
PICTURES = (
    "import torch\nt = torch.arange(6.0).reshape(2, 3)\nu = t.t()\nv = u.contiguous()\n",
    "import torch\np = torch.ones(4, requires_grad=True)\nq = (p ** 2).sum()\nq.backward()\n",
)
_serial = itertools.count()


def _fresh(code: str, round_: int) -> str:
    """The same snippet as code never run before (a comment of its own)."""
    return f"{code}# round {round_}\n"


def throughput(url: str) -> float:
    """Runs per second that ``CLIENTS`` clients get, each run a new code."""
    def new_run(c: httpx.Client) -> None:
        code = f"import torch\nx = torch.ones({next(_serial)})\ny = (x * 2).sum()\n"
        response = c.post("/api/run", json={"code": code})
        if response.status_code != 200 or not response.json()["ok"]:
            raise RuntimeError(f"run failed: {response.status_code} {response.text[:300]}")

    return steady_rate(CLIENTS, SECONDS, lambda: client(url, timeout=60), new_run)[0]


class PeakMemory:
    """The largest PSS (MiB) a replica's process tree reached while sampled in the background."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            self.peak = max(self.peak, tree_memory(self.pid)[1])

    def __enter__(self) -> PeakMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def page_load(url: str, round_: int) -> tuple[float, float, float]:
    """One docs page's requests at once: milliseconds until the last answer, and of the server's time
    on them (Server-Timing) the sandbox's, and all of it (sandbox, cache lookups, work)."""
    def frame(code: str) -> httpx.Response:
        with client(url, timeout=60) as c:
            return c.post("/embed/run", data={"code": _fresh(code, round_), "view": "both"})

    def picture(code: str) -> httpx.Response:
        with client(url, timeout=60) as c:
            return c.get("/render.svg", params={"code": encode_code(_fresh(code, round_)), "step": 3})

    started = time.perf_counter()
    with ThreadPoolExecutor(len(FRAMES) + len(PICTURES)) as pool:
        answers = [pool.submit(frame, code) for code in FRAMES] + [pool.submit(picture, c) for c in PICTURES]
        responses = [answer.result() for answer in answers]
    elapsed = (time.perf_counter() - started) * 1000
    for response in responses:
        if response.status_code != 200:
            raise RuntimeError(f"docs page request failed: {response.status_code} {response.text[:300]}")
    timings = [server_timing(r) for r in responses]
    spent = sum(t.get("sandbox", 0.0) + t.get("cache", 0.0) + t.get("work", 0.0) for t in timings)
    return elapsed, sum(t.get("sandbox", 0.0) for t in timings), spent


def floor(url: str) -> float:
    """As many requests at once as a docs page makes, for a static file: what any answer costs here."""
    def fetch(_: int) -> httpx.Response:
        with client(url, timeout=60) as c:
            return c.get("/static/favicon.svg")

    started = time.perf_counter()
    with ThreadPoolExecutor(len(FRAMES) + len(PICTURES)) as pool:
        statuses = [r.status_code for r in pool.map(fetch, range(len(FRAMES) + len(PICTURES)))]
    if statuses != [200] * len(statuses):
        raise RuntimeError(f"static requests failed: {statuses}")
    return (time.perf_counter() - started) * 1000


def _rows(case: str, metric: str, samples: list[float], unit: str) -> list[Row]:
    low, high = min(samples), max(samples)
    return [Row("cluster", case, f"{metric} (median of {len(samples)})", statistics.median(samples), unit),
            Row("cluster", case, f"{metric} (range {low:,.1f}–{high:,.1f})", high - low, unit)]


def run() -> list[Row]:
    try:
        redis = Redis()
    except Missing as error:
        print(f"[cluster] skipped: {error}")
        return []
    redis.start()
    made = Cluster(2, {**SETTINGS, "EXPLORER_RATE_STORAGE": redis.url, "EXPLORER_CACHE_URL": redis.url},
                   redis)
    try:
        made.start()
        proxy = made.proxy
        rows: list[Row] = []
        replica = made.replicas[0].process
        assert replica is not None
        time.sleep(1.0)  # idle: the pools back to their pre-forked children
        idle = tree_memory(replica.pid)[1]
        for names in (["r1"], ["r1", "r2"]):
            proxy.serve_with(names)
            throughput(proxy.url)  # warm-up: the pools' first children, the layout's first use
            with PeakMemory(replica.pid) as peak:
                samples = [throughput(proxy.url) for _ in range(REPEATS)]
            case = f"{len(names)} replica{'s' * (len(names) > 1)} behind the proxy"
            rows += _rows(case, "runs/s", samples, "runs/s")
            cores = os.cpu_count() or 1
            rows.append(Row("cluster", case, f"runs/s per core ({cores} cores, median)",
                            statistics.median(samples) / cores, "runs/s"))
        rows.append(Row("cluster", "one replica (no standby), idle", "PSS of its processes", idle, "MiB"))
        rows.append(Row("cluster", "one replica, under the runs above", "peak PSS", peak.peak, "MiB"))
        loads: list[list[tuple[float, float, float]]] = [[], [], []]  # uncached, 2nd, 3rd load
        page_load(proxy.url, -1)  # warm-up
        page_load(proxy.url, -1)
        for round_ in range(REPEATS):
            for load in loads:
                load.append(page_load(proxy.url, round_))
        if any(sandbox for load in loads[1:] for _, sandbox, _ in load):
            raise RuntimeError("a cached page still ran code in the sandbox")
        # round robin: the second load's requests mostly reach the other replica than the first's
        # (the traces from Redis, drawn there), the third's a replica that drew them already
        cases = ("docs page (3 frames + 2 pictures), uncached",
                 "docs page, 2nd load (runs from the shared cache)",
                 "docs page, 3rd load (drawings kept by each replica)")
        for case, load in zip(cases, loads, strict=True):
            rows += _rows(case, "load", [elapsed for elapsed, _, _ in load], "ms")
            rows.append(Row("cluster", case, "server time, its requests summed (median)",
                            statistics.median(spent for _, _, spent in load), "ms"))
        rows.append(Row("cluster", cases[0], "sandbox time, its runs summed (median)",
                        statistics.median(sandbox for _, sandbox, _ in loads[0]), "ms"))
        rows += _rows("the floor: as many requests for a static file", "load",
                      [floor(proxy.url) for _ in range(REPEATS)], "ms")
        return rows
    finally:
        made.close()
        redis.close()
