"""A time budget for the server's own work on one request (validation, diagnostics, layout, rendering).

Pure: no torch, no FastAPI. The web layer opens a budget per request (``use_budget``) and flips its
``cancelled`` flag when the client goes away; code that may run long asks ``current_budget().check()``
in its loops and either lets ``BudgetExceeded`` escape (the route answers a partial result) or catches
it and degrades itself ("graph too large to lay out: showing ...").

The budget travels in a ``contextvars.ContextVar``: ``run_in_threadpool`` / ``asyncio.to_thread`` copy
the context into the worker thread, so the thread sees the request's budget. Outside a request (tests,
the CLI) ``current_budget()`` is ``UNLIMITED``.
"""

from __future__ import annotations

import contextvars
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class BudgetExceeded(Exception):  # noqa: N818 - the name says what happened, like TimeoutError
    """Server work for one request ran out of its time budget (``seconds``) or the client left
    (``seconds`` is None)."""

    def __init__(self, reason: str, seconds: float | None = None) -> None:
        super().__init__(reason)
        self.seconds = seconds


class Budget:
    """``seconds`` of wall time from now; ``cancelled()`` (cheap, thread-safe) ends it early."""

    __slots__ = ("_cancelled", "_deadline", "hurried", "seconds")

    def __init__(self, seconds: float, cancelled: Callable[[], bool] | None = None) -> None:
        self.seconds = seconds
        self._deadline = time.monotonic() + seconds if math.isfinite(seconds) else math.inf
        self._cancelled = cancelled
        # Work that cut a corner for want of time (a graph placed quickly: app.render.layout): what it
        # made would come out otherwise with more time, so it is not kept (app.web.gates.Drawing)
        self.hurried = False

    def hurry(self) -> None:
        """Say that the work cut a corner for want of time (never on ``UNLIMITED``, which all share)."""
        if self is not UNLIMITED:
            self.hurried = True

    @property
    def deadline(self) -> float:
        """When it ends (``time.monotonic()``), unless cancelled before."""
        return self._deadline

    def shorten(self, seconds: float) -> None:
        """End it ``seconds`` from now, if that is sooner; the reason it gives then quotes ``seconds``."""
        deadline = time.monotonic() + seconds
        if deadline < self._deadline:
            self._deadline, self.seconds = deadline, seconds

    def check(self) -> None:
        """Raise ``BudgetExceeded`` when the time is up or the client left; cheap enough for loops."""
        if self.expired:
            raise self.exceeded()

    def left(self) -> float:
        """Seconds left (never negative; 0 once cancelled)."""
        if self._cancelled is not None and self._cancelled():
            return 0.0
        return max(0.0, self._deadline - time.monotonic())

    @property
    def expired(self) -> bool:
        if self._cancelled is not None and self._cancelled():
            return True
        return time.monotonic() >= self._deadline

    def exceeded(self) -> BudgetExceeded:
        """The exception that says why this budget is over."""
        cancelled = self._cancelled is not None and self._cancelled()
        return BudgetExceeded(self.reason(), None if cancelled else self.seconds)

    def reason(self) -> str:
        if self._cancelled is not None and self._cancelled():
            return "the client closed the connection"
        return f"the server's {self.seconds:g} s budget for this request ran out"


UNLIMITED = Budget(math.inf)

_current: contextvars.ContextVar[Budget] = contextvars.ContextVar("explorer_budget", default=UNLIMITED)


def current_budget() -> Budget:
    """The budget of the request being served (``UNLIMITED`` outside one)."""
    return _current.get()


@contextmanager
def use_budget(budget: Budget) -> Iterator[Budget]:
    """Make ``budget`` the ``current_budget()`` of this block (and of threads started with its context)."""
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


__all__ = ["UNLIMITED", "Budget", "BudgetExceeded", "current_budget", "use_budget"]
