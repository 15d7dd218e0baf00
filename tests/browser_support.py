"""Helpers for browser tests: a real server subprocess, Debian's chromium driven by Playwright.

The fixtures (``server``, ``browser``, ``page``) live in ``tests/conftest.py`` so that one browser
and one server serve every test folder.

Playwright never downloads a browser here (no ``playwright install``): it launches /usr/bin/chromium.
Without it the tests are skipped on a developer machine and fail under CI (``CI=true``).
"""

from __future__ import annotations

import os
import re
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


def runs(page) -> int:
    return page.evaluate("() => (window.AX && window.AX.runs) || 0")


def wait_for_run(page, after: int) -> None:
    """Wait until a run newer than ``after`` is on screen."""
    page.wait_for_function("n => window.AX && window.AX.runs > n", arg=after, timeout=RUN_TIMEOUT_MS)


def open_page(page, path: str = "/") -> None:
    page.goto(path)
    wait_for_run(page, 0)


def set_code(page, code: str) -> None:
    """Put ``code`` in the editor (CodeMirror) through the browser's own input, as pasting it would:
    Playwright selects the editor's content and inserts the text. Auto-indentation does not apply to
    inserted text, so the editor then holds exactly ``code`` (checked)."""
    page.get_by_test_id("code").fill(code)
    assert editor_text(page) == code


def editor_text(page) -> str:
    """The code in the editor, as CodeMirror holds it (``page`` may be a frame)."""
    return page.evaluate("() => AX.editor.text()")


def run_code(page, code: str) -> None:
    before = runs(page)
    set_code(page, code)
    page.get_by_test_id("run").click()
    wait_for_run(page, before)


def open_memory(page) -> None:
    """Open every group of the memory view (a run at model size shows each as one closed line), as a
    reader would: a click on each closed line, the module lines inside Parameters after it."""
    closed = page.locator("[data-testid=memory-view] details:not([open]):not([hidden]) > summary")
    for _ in range(64):
        found = [line for line in closed.all() if line.is_visible()]
        if not found:
            return
        found[0].click()
    raise AssertionError("the memory view's groups did not open")


def step_label(page) -> str:
    return page.get_by_test_id("step-label").inner_text()


AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
SERIOUS = ("serious", "critical")


def axe_violations(page, exclude: tuple[str, ...] = (), include: tuple[str, ...] = ()) -> list[dict]:
    """What axe-core (from npm: node_modules/axe-core) finds in the page as it is now: one dict per
    violated rule, ``{"id", "impact", "help", "nodes"}`` (the CSS paths of the failing elements).

    axe goes in through Playwright's evaluate, which the page's Content-Security-Policy does not
    govern (the page itself never loads it). ``include``/``exclude`` are CSS selectors of the parts
    to check or to leave out (another engineer's part of the page, say)."""
    if not AXE.is_file():
        missing(f"axe-core is not installed at {AXE} (scripts/setup runs npm ci)")
    if not page.evaluate("() => !!window.axe"):
        page.evaluate(AXE.read_text() + "\n;true")
    context: dict = {"exclude": [[s] for s in exclude]}
    if include:
        context["include"] = [[s] for s in include]
    return page.evaluate(
        # Settle CSS transitions first (a run fades in from .5 opacity over 150 ms): axe reads colours
        # as they are painted, so mid-fade text would fail contrast it meets once the page is still.
        """([context, tags]) => Promise.all(document.getAnimations()
               .filter(a => a.effect && a.effect.getComputedTiming().endTime !== Infinity)
               .map(a => a.finished.catch(() => null)))
             .then(() => axe.run(context, {runOnly: {type: "tag", values: tags},
                                           resultTypes: ["violations"]}))
             .then(result => result.violations.map(v => ({
               id: v.id, impact: v.impact, help: v.help,
               nodes: v.nodes.map(n => n.target.map(t => [].concat(t).join(" >>> ")).join(" ")),
             })))""",
        [context, ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"]],
    )


def serious(violations: list[dict]) -> list[dict]:
    return [v for v in violations if v["impact"] in SERIOUS]


README = ROOT / "README.md"


def readme_listener(origin: str) -> str:
    """The auto-height listener exactly as README.md documents it, for this server's origin."""
    blocks = re.findall(r"```html\n(.*?)```", README.read_text(), re.S)
    (listener,) = [b for b in blocks if "autograd-explorer:height" in b and "<script>" in b]
    return listener.replace("https://explorer.example.org", origin)
