"""Fixtures shared across test folders: one real server and one real browser per session."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from app.serving import loopback_socket
from tests.browser_support import CHROMIUM, CHROMIUM_ARGS, ROOT, RUN_TIMEOUT_MS, missing


@pytest.fixture(scope="session")
def server(tmp_path_factory) -> str:
    """``python -m app serve`` on a free port, as a user starts it; stopped with its whole group."""
    listener = loopback_socket()
    port = listener.getsockname()[1]
    log_path = tmp_path_factory.mktemp("server") / "server.log"
    # Every browser test runs from 127.0.0.1 against this one server, and together they run more
    # snippets a minute than the default per-client rate (120) allows on a fast machine: a run
    # answered "running snippets faster than the playground allows" has no steps, and the test that
    # made it failed on the machine's speed. The rate's own tests start servers of their own.
    env = {**os.environ, "EXPLORER_DATA_DIR": str(log_path.parent), "PYTHONPATH": str(ROOT),
           "EXPLORER_RATE_PER_MINUTE": "100000", "EXPLORER_RATE_BURST": "100000"}
    with open(log_path, "wb") as log, listener:
        process = subprocess.Popen(
            [sys.executable, "-m", "app", "serve", "--fd", str(listener.fileno())], cwd=ROOT, env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, pass_fds=(listener.fileno(),),
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=5) as response:
                if response.status == 200:
                    break
        except OSError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail("the server did not become healthy:\n" + log_path.read_text()[-3000:])
        time.sleep(0.3)
    yield url
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="session")
def browser():
    if not os.path.exists(CHROMIUM):
        missing(f"Debian's chromium is not installed at {CHROMIUM} (apt-get install -y chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, server):
    """A fresh page at 1440x900; any script error or CSP violation fails the test."""
    context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=server)
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda msg: problems.append(f"console {msg.type}: {msg.text}")
            if msg.type == "error" else None)
    page.set_default_timeout(RUN_TIMEOUT_MS)
    yield page
    context.close()
    assert problems == []
