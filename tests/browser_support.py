"""Helpers for browser tests: a real server subprocess, Debian's chromium driven by Playwright.

The fixtures (``server``, ``browser``, ``page``) live in ``tests/conftest.py`` so that one browser
and one server serve every test folder.

Playwright never downloads a browser here (no ``playwright install``): it launches /usr/bin/chromium.
Without it the tests are skipped on a developer machine and fail under CI (``CI=true``).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run"]
RUN_TIMEOUT_MS = 60_000  # a run includes the sandbox's start on a cold 2-core machine


def missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI needs it: .ci/run installs Debian's chromium)")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def runs(page) -> int:
    return page.evaluate("() => (window.AX && window.AX.runs) || 0")


def wait_for_run(page, after: int) -> None:
    """Wait until a run newer than ``after`` is on screen."""
    page.wait_for_function("n => window.AX && window.AX.runs > n", arg=after, timeout=RUN_TIMEOUT_MS)


def open_page(page, path: str = "/") -> None:
    page.goto(path)
    wait_for_run(page, 0)


def run_code(page, code: str) -> None:
    before = runs(page)
    page.get_by_test_id("code").fill(code)
    page.get_by_test_id("run").click()
    wait_for_run(page, before)


def step_label(page) -> str:
    return page.get_by_test_id("step-label").inner_text()
