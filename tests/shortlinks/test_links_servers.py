"""Real server processes: links survive a restart and agree across replicas sharing one database."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from app.serving import loopback_socket
from app.web.permalink import decode_code

ROOT = Path(__file__).resolve().parents[2]
CODE = "import torch\na = torch.randn(3, requires_grad=True)\nb = a.clone()\nc = a.detach()\n"


@contextlib.contextmanager
def server(env: dict[str, str]) -> Iterator[httpx.Client]:
    """``python -m app serve`` as a user starts it; yields a client for it; SIGTERM on exit."""
    listener = loopback_socket()  # handed to the server: the port is never free for another to take
    port = listener.getsockname()[1]
    clean = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "EXPLORER_DATABASE_URL")}
    with listener:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--fd", str(listener.fileno())],
            # Links never run code: the plain runner spares each start the fork server's warm-up.
            cwd=ROOT, env={**clean, "EXPLORER_SANDBOX": "subprocess", "EXPLORER_UNSAFE_DEV": "1", **env},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, pass_fds=(listener.fileno(),),
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=15)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise AssertionError(f"server exited: {process.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.TransportError):
                if client.get("/healthz").status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise AssertionError("server did not answer /healthz within 60 s")
            time.sleep(0.1)
        yield client
    finally:
        client.close()
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stderr.close()


def share(client: httpx.Client, code: str) -> dict:
    response = client.post("/api/links", json={"code": code})
    assert response.status_code == 200, response.text
    return response.json()


def resolve(client: httpx.Client, link_id: str) -> str:
    follow = client.get(f"/s/{link_id}")
    assert follow.status_code == 303
    carried = decode_code(parse_qs(urlsplit(follow.headers["location"]).query)["code"][0], 20 * 1024)
    read = client.get(f"/api/links/{link_id}")
    assert read.status_code == 200, read.text
    assert read.json()["code"] == carried
    return carried


@pytest.mark.slow
def test_two_servers_share_one_postgresql_and_survive_restarts(pg_url: str) -> None:
    env = {"DATABASE_URL": pg_url}
    with server(env) as first, server(env) as second:
        made = share(first, CODE)
        assert resolve(second, made["id"]) == CODE  # the other replica serves it
        assert share(second, CODE) == made  # and derives the same id for the same code
        other = share(second, CODE + "d = c + 1\n")
        assert resolve(first, other["id"]) == CODE + "d = c + 1\n"
        # Both replicas racing on new snippets still agree on one id each.
        fresh = [f"e = {n}\n" for n in range(10)]
        with ThreadPoolExecutor(2) as pool:
            answers = list(pool.map(lambda client: [share(client, c) for c in fresh], (first, second)))
        assert answers[0] == answers[1]
    with server(env) as restarted:  # every process gone, then a fresh one
        assert resolve(restarted, made["id"]) == CODE
        assert resolve(restarted, other["id"]) == CODE + "d = c + 1\n"
        assert share(restarted, CODE) == made


@pytest.mark.slow
def test_sqlite_links_survive_a_restart(tmp_path: Path) -> None:
    env = {"EXPLORER_DATA_DIR": str(tmp_path / "data")}
    with server(env) as first:
        made = share(first, CODE)
    assert (tmp_path / "data" / "links.sqlite3").is_file()
    with server(env) as restarted:
        assert resolve(restarted, made["id"]) == CODE
        assert share(restarted, CODE) == made
