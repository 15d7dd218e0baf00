"""``python -m app.bench soak``: a bounded flood of mixed requests against a real server, on loopback.

The server is started as a user starts it (``python -m app serve``: the connection limits of
``app.serving``), rate limit lifted (one client sends everything). ``CONCURRENCY`` client threads send
``REQUESTS`` requests drawn in a fixed, seeded order from: benign runs, hostile snippets (many graph
nodes, a grid of lists, a snippet that times out), a 20 MB declared body, a 20 MB nested-``[`` body
streamed without a length, malformed JSON, idle connections that never speak, bodies that trickle,
``/render.svg`` and ``/healthz``. Then the fork server is killed once, and benign runs are sent until
one succeeds; last, a benign run is checked against torch in this process.

Figures: requests served, 5xx answers (target 0), the server's RSS before and after (growth target
≤ 50 MB), p95 of the benign runs during the flood, the time to recover after the fork-server kill
(target ≤ 2 s) and the failed requests after it beyond the one in flight (target 0).
"""

from __future__ import annotations

import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.bench import Row
from app.bench.http import wait_until_healthy
from app.serving import loopback_socket

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 3000
CONCURRENCY = 8
BENIGN = """\
x = torch.arange(4.0, requires_grad=True)
y = (x * x).sum()
y.backward()
print(y.item(), x.grad.tolist())
"""
HOSTILE = [
    "ts = [torch.ones(1, requires_grad=True) * 2 for i in range(2000)]\n",
    "grid = [[torch.zeros(1) for j in range(64)] for i in range(64)]\nrows = []\n"
    "for row in grid:\n    rows.append(row)\n    rows.append(row)\n",
    "n = 0\nwhile True:\n    n += 1\n",
    "import os\nos.system('id')\n",
]
JSON = {"Content-Type": "application/json"}
KINDS = ["benign"] * 24 + ["hostile"] * 2 + ["huge", "streamed", "malformed", "idle", "slow", "svg", "health"]


@dataclass
class Report:
    served: int = 0
    statuses: Counter = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    benign_ms: list[float] = field(default_factory=list)
    rss_before_mib: float = 0.0
    rss_peak_mib: float = 0.0
    rss_after_mib: float = 0.0
    recovery_s: float = 0.0
    failed_after_kill: int = 0
    matches_torch: bool = False
    seconds: float = 0.0


class SoakServer:
    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="explorer-soak-"))
        held = loopback_socket()  # handed to the server (--fd): no other process can take the port
        self.port = held.getsockname()[1]
        env = {**os.environ, "EXPLORER_DATA_DIR": str(self.workdir / "data"),
               "EXPLORER_RATE_PER_MINUTE": "1000000000", "EXPLORER_RATE_BURST": "1000000000",
               "EXPLORER_WALL_SECONDS": "2", "EXPLORER_CPU_SECONDS": "2", "EXPLORER_BODY_SECONDS": "2",
               "EXPLORER_SERVER_SECONDS": "1"}
        self.log = (self.workdir / "server.log").open("wb")
        with held:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "app", "serve", "--fd", str(held.fileno())],
                cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(held.fileno(),),
            )
        self.url = f"http://127.0.0.1:{self.port}"
        if not wait_until_healthy(self.url, self.process):
            self.stop()
            raise RuntimeError(f"soak server did not start; see {self.workdir / 'server.log'}")

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def fork_server(self) -> int:
        """The fork server in use: the oldest (its warm standby is started after it)."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == self.process.pid and b"forkserver" in cmdline:
                found.append((int(fields[19]), int(entry)))
        if not found:
            raise RuntimeError("no fork server")
        return min(found)[1]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def _raw(port: int, data: bytes, hold: float = 0.0, trickle: bytes = b"") -> int:
    """Send ``data`` (then ``trickle`` a byte at a time), hold the connection, return the status (0: none)."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        try:
            sock.sendall(data)
            for byte in trickle:
                time.sleep(0.3)
                sock.sendall(bytes([byte]))
        except OSError:
            pass
        if hold:
            time.sleep(hold)
            return 0
        try:
            head = sock.recv(64)
        except OSError:
            return 0
    return int(head.split()[1]) if head.startswith(b"HTTP/") else 0


def _one(kind: str, client: httpx.Client, port: int, rng: random.Random, report: Report) -> int:
    from app.web.permalink import encode_code

    if kind == "benign":
        start = time.monotonic()
        status = client.post("/api/run", json={"code": BENIGN}).status_code
        if status == 200:
            report.benign_ms.append((time.monotonic() - start) * 1000)
        return status
    if kind == "hostile":
        code = rng.choice(HOSTILE)
        route = rng.choice(["/api/run", "/run", "/embed/run"])
        if route == "/api/run":
            return client.post(route, json={"code": code}).status_code
        return client.post(route, data={"code": code}).status_code
    if kind == "huge":
        head = (b"POST /api/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 20971520\r\n\r\n")
        return _raw(port, head + b"[" * 65536)
    if kind == "streamed":
        chunks = (b"[" * 65536 for _ in range(320))
        try:
            return client.post("/api/run", content=chunks, headers=JSON).status_code
        except httpx.TransportError:
            return 413  # answered and closed while we were still sending
    if kind == "malformed":
        return client.post("/api/run", content=b'{"code": [' + b"[" * 5000, headers=JSON).status_code
    if kind == "idle":
        return _raw(port, b"", hold=1.0)
    if kind == "slow":
        head = (b"POST /api/links HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 100\r\n\r\n{")
        return _raw(port, head, trickle=b"        ")
    if kind == "svg":
        code = rng.choice([BENIGN, HOSTILE[0]])
        token = encode_code(code + f"# {rng.random()}\n")  # a new picture each time: no cache hit
        return client.get("/render.svg", params={"code": token}).status_code
    return client.get("/healthz").status_code


def flood(server: SoakServer, requests: int, concurrency: int, report: Report) -> None:
    plan = random.Random(10).choices(KINDS, k=requests)
    lock = threading.Lock()
    cursor = iter(range(requests))

    def worker(index: int) -> None:
        rng = random.Random(index)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while True:
                with lock:
                    position = next(cursor, None)
                if position is None:
                    return
                kind = plan[position]
                try:
                    status = _one(kind, client, server.port, rng, report)
                except httpx.TransportError as error:
                    status = -1
                    with lock:
                        report.server_errors.append(f"{kind}: {type(error).__name__}")
                with lock:
                    report.served += 1
                    report.statuses[status] += 1
                    if status >= 500:
                        report.server_errors.append(f"{kind}: {status}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def recover(server: SoakServer, report: Report) -> None:
    """Kill the fork server once; time until a benign run succeeds again, counting failures after it."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        os.kill(server.fork_server(), signal.SIGKILL)
        killed = time.monotonic()
        first = True
        while time.monotonic() - killed < 60:
            answer = client.post("/api/run", json={"code": BENIGN})
            if answer.status_code == 200 and answer.json()["ok"]:
                break
            if not first:
                report.failed_after_kill += 1
            first = False  # the run in flight when the fork server died may fail: that one is allowed
        report.recovery_s = time.monotonic() - killed


def matches_torch(server: SoakServer) -> bool:
    import torch

    torch.manual_seed(0)
    x = torch.arange(4.0, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    expected = f"{y.item()} {x.grad.tolist()}\n"
    answer = httpx.post(f"{server.url}/api/run", json={"code": BENIGN}, timeout=60).json()
    return bool(answer["ok"]) and answer["steps"][-1]["stdout"] == expected


def soak(requests: int = REQUESTS, concurrency: int = CONCURRENCY) -> Report:
    report = Report()
    server = SoakServer()
    try:
        for _ in range(10):  # warm: the first runs fault in pages the server keeps
            httpx.post(f"{server.url}/api/run", json={"code": BENIGN}, timeout=60)
        report.rss_before_mib = report.rss_peak_mib = server.rss_mib()
        done = threading.Event()

        def sample_peak() -> None:
            while not done.wait(0.1):
                report.rss_peak_mib = max(report.rss_peak_mib, server.rss_mib())

        sampler = threading.Thread(target=sample_peak, daemon=True)
        sampler.start()
        start = time.monotonic()
        try:
            flood(server, requests, concurrency, report)
        finally:
            done.set()
            sampler.join()
        report.seconds = time.monotonic() - start
        recover(server, report)
        report.matches_torch = matches_torch(server)
        time.sleep(1.0)
        report.rss_after_mib = server.rss_mib()
    finally:
        server.stop()
    return report


def run() -> list[Row]:
    report = soak()
    if report.server_errors:  # which kinds failed, and how (a 5xx, or the connection dropped)
        print(f"[soak] server errors: {dict(Counter(report.server_errors))}", file=sys.stderr)
    case = f"{report.served} mixed requests, concurrency {CONCURRENCY}"
    p95 = statistics.quantiles(report.benign_ms, n=20)[18] if len(report.benign_ms) >= 20 else float("nan")
    return [
        Row("soak", case, "requests served", report.served, "requests"),
        Row("soak", case, "wall time", report.seconds, "s"),
        Row("soak", case, "5xx answers and dropped connections", len(report.server_errors), "answers", 0.0),
        Row("soak", case, "server RSS before", report.rss_before_mib, "MiB"),
        Row("soak", case, "server RSS peak during the flood", report.rss_peak_mib, "MiB"),
        Row("soak", case, "server RSS after", report.rss_after_mib, "MiB"),
        Row("soak", case, "server RSS growth", report.rss_after_mib - report.rss_before_mib, "MiB", 50.0),
        Row("soak", case, "benign /api/run p95 during the flood", p95, "ms"),
        Row("soak", "fork server killed", "time to recover", report.recovery_s, "s", 2.0),
        Row("soak", "fork server killed", "failed requests beyond the one in flight",
            report.failed_after_kill, "requests", 0.0),
        Row("soak", "after the flood", "benign run matches torch (1 = yes)", float(report.matches_torch),
            "", None),
    ]
