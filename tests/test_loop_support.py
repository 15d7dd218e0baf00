"""Tests run their coroutines through ``tests.loop_support.run_in_own_loop``, which works while an
event loop runs in the main thread (as Playwright's sync API leaves one once a browser test has
run); none starts a loop in its own thread, which passes or fails by test order."""

from __future__ import annotations

import ast
import asyncio
import contextvars
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.loop_support import run_in_own_loop

TESTS = Path(__file__).resolve().parent
# calls that start an event loop in the calling thread
STARTS_A_LOOP = {("asyncio", "run"), ("anyio", "run"), ("trio", "run"), ("asyncio", "Runner")}
VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


@pytest.fixture
def loop_running_here() -> Iterator[None]:
    """This thread as a browser session leaves it: an event loop marked running in it. The loop it
    replaces is put back (in the whole suite, the session's Playwright loop: marked not running, the
    browser's connection is lost for every later browser test)."""
    previous = asyncio.events._get_running_loop()
    loop = asyncio.new_event_loop()
    asyncio.events._set_running_loop(loop)
    try:
        yield
    finally:
        asyncio.events._set_running_loop(previous)
        loop.close()


async def _answer() -> str:
    await asyncio.sleep(0)
    return VAR.get()


async def _fail() -> None:
    raise LookupError("from the coroutine")


def test_the_helper_runs_where_asyncio_run_refuses(loop_running_here: None) -> None:
    coroutine = _answer()
    with pytest.raises(RuntimeError, match="running event loop"):
        asyncio.run(coroutine)
    coroutine.close()
    token = VAR.set("the caller's")
    try:
        assert run_in_own_loop(_answer()) == "the caller's"  # started from the caller's context
    finally:
        VAR.reset(token)
    with pytest.raises(LookupError, match="from the coroutine"):
        run_in_own_loop(_fail())


def _loop_starts(path: Path) -> Iterator[int]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (isinstance(owner, ast.Name) and (owner.id, node.func.attr) in STARTS_A_LOOP) \
                    or node.func.attr == "run_until_complete":
                yield node.lineno


def test_no_test_starts_an_event_loop_in_its_own_thread() -> None:
    found = [f"{path.relative_to(TESTS)}:{line}" for path in sorted(TESTS.rglob("*.py"))
             if path.name not in ("loop_support.py", Path(__file__).name) for line in _loop_starts(path)]
    assert found == [], "use tests.loop_support.run_in_own_loop: " + ", ".join(found)
