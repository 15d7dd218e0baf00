"""Coroutines run by tests, each in an event loop of its own thread.

Once a browser test has run, the session's Playwright (its sync API) keeps an event loop running in
the main thread until the session ends, and ``asyncio.run`` / ``anyio.run`` refuse to start there
("cannot be called from a running event loop"): a test that runs a coroutine in the main thread
passes alone and fails after a browser test. ``tests/test_loop_support.py`` keeps every test on this
one helper."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_in_own_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coroutine)`` in a fresh thread, started from the caller's context (contextvars),
    as it would be in the caller's own thread: its result, or its exception raised here."""
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(context.run, asyncio.run, coroutine).result()
