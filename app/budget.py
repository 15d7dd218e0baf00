"""STAND-IN until branch ``harden`` lands ``app/budget.py``: the same API, nothing more.

(The graph branch codes against this API; the lead deletes this file at merge and keeps harden's.)
Server work for one request runs under a ``Budget``; code deep inside the render asks
``current_budget()`` whether there is time left, and degrades instead of running over.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class BudgetExceeded(Exception):
    """The request ran out of time, or its client went away."""


class Budget:
    def __init__(self, seconds: float, cancelled: Callable[[], bool] | None = None) -> None:
        self.deadline = time.monotonic() + seconds
        self.cancelled = cancelled

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def expired(self) -> bool:
        return self.left() <= 0 or (self.cancelled is not None and self.cancelled())

    def check(self) -> None:
        if self.expired:
            raise BudgetExceeded("the request ran out of time")


UNLIMITED = Budget(float("inf"))
_current: ContextVar[Budget] = ContextVar("budget", default=UNLIMITED)


def current_budget() -> Budget:
    return _current.get()


@contextmanager
def use_budget(budget: Budget) -> Iterator[Budget]:
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)
