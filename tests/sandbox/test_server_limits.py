"""Server checks against ``python -m app serve`` (a real uvicorn with ``app.serving``'s limits):
bodies are refused before they are read, slow or idle connections are closed, a flood of connections
cannot lock others out, the rate-limit token comes before the body, and hostile shapes stay inside
the per-request server budget (``Server-Timing: work``) on every route that draws or analyses."""

from __future__ import annotations

import os
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sandbox_support import Server, assert_benign, benign_expected, fork_servers, start_server

SERVER_SECONDS = 1.0
HARD_STOP_GRACE = 1.0  # app.web.work: work that never checks its budget is stopped this much later
LIMITS = {
    "EXPLORER_SERVER_SECONDS": str(SERVER_SECONDS),
    "EXPLORER_KEEP_ALIVE_SECONDS": "1",
    "EXPLORER_HEADER_SECONDS": "2",
    "EXPLORER_BODY_SECONDS": "1",
    "EXPLORER_MAX_CONNECTIONS": "24",
    "EXPLORER_RATE_PER_MINUTE": "600",
    "EXPLORER_RATE_BURST": "30",
    # loopback is the proxy: a test that needs a client of its own names one in X-Forwarded-For
    "EXPLORER_TRUSTED_PROXIES": "127.0.0.1",
}
HUGE = 20 * 1024 * 1024
ROUTES = ["/api/run", "/run", "/embed/run", "/api/links", "/healthz", "/"]

# A 64x64 grid of lists appended twice: thousands of variable names per step (issue #10, 3).
GRID = """\
grid = [[torch.zeros(1) for j in range(64)] for i in range(64)]
rows = []
for row in grid:
    rows.append(row)
    rows.append(row)
"""
# Thousands of unconnected graph nodes in one line (issue #10, 2).
MANY = "ts = [torch.ones(1, requires_grad=True) * 2 for i in range(2000)]\n"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start_server(tmp_path_factory.mktemp("served"), LIMITS, serve=True)
    yield server
    server.stop()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _raw(port: int, head: bytes, timeout: float = 10) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.sendall(head)
    return sock


def _status(sock: socket.socket) -> int:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            return 0  # closed without an answer
        data += chunk
    return int(data.split()[1])


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """True when the server closes ``sock`` (EOF) within ``seconds`` without being sent anything more."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
        return True
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _work_ms(response: httpx.Response) -> float:
    match = re.search(r"work;dur=([\d.]+)", response.headers.get("server-timing", ""))
    assert match, response.headers
    return float(match.group(1))


@pytest.mark.parametrize("route", ROUTES)
def test_a_huge_declared_body_is_refused_before_it_is_read(served: Server, route: str) -> None:
    before = _rss_kib(served.pid)
    head = (f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {HUGE}\r\n\r\n").encode()
    sock = _raw(served.port, head + b"[" * 65536)
    try:
        assert _status(sock) == 413
    finally:
        sock.close()
    assert served.health().status_code == 200
    assert _rss_kib(served.pid) - before < 20 * 1024


@pytest.mark.parametrize("route", ["/api/run", "/run", "/api/links"])
def test_a_huge_streamed_body_is_cut_off_at_the_cap(served: Server, route: str) -> None:
    before = _rss_kib(served.pid)

    def nested() -> Iterator[bytes]:
        for _ in range(HUGE // 65536):
            yield b"[" * 65536

    headers = {"Content-Type": "application/json"}
    try:
        response = served.client.post(route, content=nested(), headers=headers)
        # The page's own, smaller bound may come first: a fragment that says so (htmx shows it).
        page_refusal = route == "/run" and response.status_code == 200 and "longer than" in response.text
        assert response.status_code == 413 or page_refusal, response.text[:300]
    except httpx.TransportError:
        pass  # the server answered 413 and closed while the client was still sending
    assert served.health().status_code == 200
    assert _rss_kib(served.pid) - before < 20 * 1024


def test_a_trickling_body_gets_408(served: Server) -> None:
    sock = _raw(served.port, b"POST /api/links HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n{")
    try:
        for _ in range(6):  # one byte every 0.4 s: past the 1 s body deadline
            time.sleep(0.4)
            try:
                sock.sendall(b" ")
            except OSError:
                break
        assert _status(sock) == 408
    finally:
        sock.close()


def test_a_silent_connection_is_closed(served: Server) -> None:
    sock = socket.create_connection(("127.0.0.1", served.port))
    try:
        assert _closed_within(sock, 30)  # keep-alive is 1 s here: a connection that never speaks goes
    finally:
        sock.close()


def test_a_trickling_head_is_closed(served: Server) -> None:
    sock = _raw(served.port, b"GET /healthz HTTP/1.1\r\n")
    try:
        start = time.monotonic()
        closed = False
        # the head's 2 s deadline closes it; a ceiling far from it, for a busy machine's late timers
        while not closed and time.monotonic() - start < 30:
            try:
                sock.sendall(b"X-Slow: 1\r\n")  # a header line every 0.5 s: never idle for 1 s
            except OSError:
                closed = True
                break
            closed = _closed_within(sock, 0.5)
        assert closed
    finally:
        sock.close()


def test_a_connection_flood_does_not_lock_others_out(served: Server) -> None:
    cap = int(LIMITS["EXPLORER_MAX_CONNECTIONS"])
    before = len(os.listdir(f"/proc/{served.pid}/fd"))
    flood = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(60)]
    try:
        deadline = time.monotonic() + 60  # the server has taken the flood up to its cap
        while len(os.listdir(f"/proc/{served.pid}/fd")) < before + cap - 2:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # Beyond the cap, the connection idle the longest makes room for the new one.
        with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30) as fresh:
            assert fresh.get("/healthz").status_code == 200
        benign_expected()
        assert_benign(served)
    finally:
        for sock in flood:
            sock.close()


def test_the_rate_limit_comes_before_the_body(served: Server) -> None:
    # Its own client address (X-Forwarded-For from loopback is trusted here): a budget of its own.
    client = {"X-Forwarded-For": "198.51.100.7"}
    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30, headers=client) as c:
        # Over its rate: the answer comes at once, though the declared body never arrives (reading
        # it would wait for the body deadline and answer 408).
        for route in ("/api/run", "/api/links"):
            head = (f"POST {route} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    "X-Forwarded-For: 198.51.100.7\r\nContent-Length: 5000\r\n\r\n")
            # The window moves (30 in any 3 s): on a loaded machine a token may come back between
            # the last 429 and the raw request, which then rightly waits for its body (408). Emptied
            # again and asked again, up to three times; a server that read the body first would
            # answer 408 every time.
            for _attempt in range(3):
                for _ in range(4 * int(LIMITS["EXPLORER_RATE_BURST"])):
                    if c.post("/api/links", json={"code": "x = 1"}).status_code == 429:
                        break
                sock = _raw(served.port, head.encode())
                try:
                    status = _status(sock)
                finally:
                    sock.close()
                if status == 429:
                    break
            assert status == 429, route


@pytest.mark.parametrize("route", ["/api/run", "/run", "/embed/run"])
@pytest.mark.parametrize("code", [GRID, MANY], ids=["grid", "many-nodes"])
def test_hostile_shapes_stay_inside_the_server_budget(served: Server, route: str, code: str) -> None:
    if route == "/api/run":  # the delta format: v1 of the grid would be ~90 MiB (a clear 413)
        response = served.client.post(route, json={"code": code, "format": "delta"})
    else:
        response = served.client.post(route, data={"code": code})
    assert response.status_code == 200, response.text[:500]
    # Work that overruns its budget is stopped (a grace later) and answered partially, never a 500.
    assert _work_ms(response) < (SERVER_SECONDS + HARD_STOP_GRACE + 1.5) * 1000
    assert served.health().status_code == 200


def test_a_shared_image_link_stays_inside_the_server_budget(served: Server) -> None:
    from app.web.permalink import encode_code

    response = served.client.get("/render.svg", params={"code": encode_code(MANY)})
    assert response.status_code == 200 and response.text.startswith("<svg")
    assert _work_ms(response) < (SERVER_SECONDS + HARD_STOP_GRACE + 1.5) * 1000


@pytest.mark.parametrize("route", ["/api/run", "/run"])
def test_server_timing_says_what_the_sandbox_took_beside_the_work(served: Server, route: str) -> None:
    """``Server-Timing: sandbox;dur=…, work;dur=…``, both measured by the server: a line of heavy
    compute and a tiny trace spend their time in the sandbox, and the two never add up to more
    than the request took as the client saw it."""
    code = "total = sum(i * i for i in range(2_000_000))\n"
    started = time.monotonic()
    if route == "/api/run":
        response = served.client.post(route, json={"code": code, "format": "delta"})
    else:
        response = served.client.post(route, data={"code": code})
    elapsed_ms = (time.monotonic() - started) * 1000
    assert response.status_code == 200, response.text[:500]
    timing = response.headers.get("server-timing", "")
    match = re.fullmatch(r"sandbox;dur=([\d.]+), work;dur=([\d.]+)", timing)
    assert match, timing
    sandbox_ms, work_ms = float(match.group(1)), float(match.group(2))
    assert sandbox_ms > work_ms > 0
    assert sandbox_ms + work_ms <= elapsed_ms


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(pair.decode().split("=", 1) for pair in pairs if b"=" in pair)


def test_the_server_runs_on_the_allocator_it_was_measured_with(served: Server) -> None:
    """``python -m app serve`` starts itself again, same process, with Python's objects on glibc's
    malloc (``app.heap.serve_environment``: the soak's memory after a flood), unless whoever started
    it chose an allocator; the fork server, hence every run, is started without it."""
    chosen = os.environ.get("PYTHONMALLOC")
    assert _environ(served.pid).get("PYTHONMALLOC") == (chosen or "malloc")
    assert served.process.poll() is None  # the process that was started is the one serving
    for fork_server in fork_servers(served):
        assert "PYTHONMALLOC" not in _environ(fork_server)


def test_the_allocator_a_user_chose_is_kept() -> None:
    from app.heap import serve_environment

    assert serve_environment({"PATH": "/bin"}) == {"PATH": "/bin", "PYTHONMALLOC": "malloc"}
    assert serve_environment({"PYTHONMALLOC": "pymalloc"}) is None
    assert serve_environment({"PYTHONMALLOC": "malloc", "HOME": "/root"}) is None
