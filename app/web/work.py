"""The server's own work for one request (diagnostics, layout, templates, SVG) under its ``Budget``.

``budgeted(request, fn, *args)`` runs ``fn`` in a worker thread with ``app.budget.current_budget()``
set to a fresh ``Budget(EXPLORER_SERVER_SECONDS)``, and watches from the event loop meanwhile:

* the client leaving (``request.is_disconnected()``, polled) cancels the budget, so the next
  ``check()`` in the work raises ``BudgetExceeded``;
* work that never calls ``check()`` (a library loop) is stopped anyway once the budget is spent
  (plus a grace): the watcher raises ``HardStop`` inside the thread, at its next bytecode, through
  ``PyThreadState_SetAsyncExc``. It is a ``BaseException`` so that no ``except Exception`` in the
  work swallows it; it reaches the caller as ``BudgetExceeded``. It is only ever aimed at the thread
  while that thread is inside ``fn`` (a lock guards the hand-over), never at an idle pool thread.

The caller answers a partial result on ``BudgetExceeded`` (``app.web.gates``). Seconds spent are added
to the request's ``Server-Timing`` (``app.web.limits``).
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from fastapi import Request
from fastapi.concurrency import run_in_threadpool

from app.budget import Budget, use_budget
from app.heap import collector_paused
from app.web.limits import WORK_KEY, BodyTooLarge, BodyTooSlow

T = TypeVar("T")
POLL_SECONDS = 0.1
HARD_STOP_GRACE = 1.0  # cooperative checks get this long to end the work before it is stopped


class HardStop(BaseException):  # noqa: N818
    """Raised into a worker thread whose work overran its budget without checking it."""


class Once(Generic[T]):
    """``fn(*args)``, called once, after which it holds neither. A worker thread keeps the job it ran
    a moment after it reported the result (anyio's worker drops its job's arguments only after
    handing the result to the event loop), and the loop, already on with the answer, may meanwhile
    free what the request made (``app.web.after``): a trace still referenced from there would miss
    that sweep and the heap trim after it (tests/api/test_trim.py saw it one run in three)."""

    def __init__(self, fn: Callable[..., T], args: tuple[Any, ...]) -> None:
        self._call: tuple[Callable[..., T], tuple[Any, ...]] | None = (fn, args)

    def __call__(self) -> T:
        assert self._call is not None, "called twice"
        fn, args = self._call
        self._call = None
        return fn(*args)


async def in_thread(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread that holds no reference to them once it returned (``Once``)."""
    return await run_in_threadpool(Once(fn, args))


class _Watched:
    """One run of ``fn`` in a worker thread, stoppable from another thread while (and only while) it runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ident: int | None = None
        self.running = False
        self.sent = False

    def call(self, budget: Budget, job: Once[T]) -> T:
        try:
            try:
                with self.lock:
                    self.ident, self.running = threading.get_ident(), True
                with use_budget(budget), collector_paused():
                    return job()
            finally:
                with self.lock:
                    self.running = False  # from here on no HardStop is sent
        except HardStop:
            raise budget.exceeded() from None
        finally:
            if self.sent:
                _drain()

    def stop(self) -> None:
        with self.lock:
            if self.running and not self.sent and self.ident is not None:
                self.sent = True
                _set_async_exc(self.ident, HardStop)


def _drain() -> None:
    """Let a HardStop that was sent but not yet raised arrive here, harmlessly. (Withdrawing it with
    ``PyThreadState_SetAsyncExc(id, NULL)`` is no option: CPython then leaves its eval breaker set for
    good, and every thread of the process runs slower from then on.)"""
    try:
        for _ in range(1000):
            pass
    except HardStop:
        pass


def _set_async_exc(ident: int, exc: type[BaseException]) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(ident), ctypes.py_object(exc))


async def _client_left(request: Request) -> bool:
    """Whether the client closed the connection. Asking reads the next message, and for a route that
    stopped reading a body past its own bound (a form over the code's size) that may be more body:
    past the server's cap the body limits raise (``app.web.limits``), which says nothing about the
    client, who is still there sending it — not a failure of the work."""
    try:
        return await request.is_disconnected()
    except (BodyTooLarge, BodyTooSlow):
        return False


class WorkBudget(Budget):
    """A request's budget for its server work, ended early when the client leaves (``budgeted``)."""

    def __init__(self, seconds: float) -> None:
        self.gone = threading.Event()
        super().__init__(seconds, self.gone.is_set)


def work_budget(request: Request, runs: int = 1, waiting: float = 0.0) -> WorkBudget:
    """``runs`` runs' worth of the server's work budget (a compare draws two); ``waiting``: seconds
    more, for work that starts before the run it reads and waits for its steps (``app.web.streamed``:
    once the run has ended, the caller shortens it to a run's worth)."""
    return WorkBudget(float(request.app.state.settings.server_seconds) * runs + waiting)


async def budgeted(request: Request, fn: Callable[..., T], *args: Any, runs: int = 1,
                   budget: WorkBudget | None = None, timed: bool = True) -> T:
    """``fn(*args)`` in a worker thread under the request's budget (``runs`` runs' worth, or the
    ``budget`` given); raises ``BudgetExceeded``. ``timed``: add the seconds to ``Server-Timing``'s
    work (else the caller says what counts). The work is stopped a grace after the budget's deadline,
    read at every poll: a budget shortened meanwhile stops it sooner."""
    try:
        return await _budgeted(request, fn, args, runs, budget, timed)
    except Exception as error:
        forget_frames(error)
        del fn, args  # this frame, still running, is in the traceback too
        raise


def forget_frames(error: BaseException) -> None:
    """Drop the locals of the frames an error raised out of the work has left (its traceback, and its
    context's: a ``HardStop`` behind a ``BudgetExceeded``), as far as they are done. They hold what the
    work read and made — the trace, a page's views, ~5-15 MB for a large run — and they sit in
    reference cycles (the futures that carried the error hold it, and the frames that awaited them
    hold the futures): left alone, all of it waits for a full collection of the cyclic collector,
    which a server under steady load runs rarely (measured by ``python -m app.bench soak``: ~115 MiB
    of such garbage from the last 24 partial answers). Only the locals go; the traceback still says
    where the error came from."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)  # (the frames still running are skipped)
        pending += [current.__context__, current.__cause__]


async def _budgeted(request: Request, fn: Callable[..., T], args: tuple[Any, ...], runs: int,
                    budget: WorkBudget | None, timed: bool) -> T:
    budget = budget if budget is not None else work_budget(request, runs)
    gone = budget.gone
    watched = _Watched()
    started = time.monotonic()
    left_at = math.inf  # when the client was seen gone
    task = asyncio.ensure_future(run_in_threadpool(watched.call, budget, Once(fn, args)))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=POLL_SECONDS)
            if done:
                try:
                    return task.result()
                except HardStop:  # arrived on its way out of the thread: the budget ran out all the same
                    raise budget.exceeded() from None
            now = time.monotonic()
            if not gone.is_set() and await _client_left(request):
                gone.set()
                left_at = now
            if now >= min(budget.deadline, left_at) + HARD_STOP_GRACE:
                watched.stop()
    finally:
        # The slot (app.web.gates) is held until the thread is really done: a cancelled request
        # (server shutdown) still waits for the work, which the budget now ends quickly.
        if not task.done():
            gone.set()
            watched.stop()
            await asyncio.shield(asyncio.wait({task}))
        if timed:
            request.scope[WORK_KEY] = request.scope.get(WORK_KEY, 0.0) + time.monotonic() - started
