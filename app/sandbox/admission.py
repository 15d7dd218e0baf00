"""Backpressure in front of the sandbox: a bounded number of runs and a bounded queue (the per-client
rate is ``app.web.rate``).

Loop-agnostic on purpose (a lock and futures woken with ``call_soon_threadsafe``): test clients run
each request in a loop of their own, and the pool itself lives in threads.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from dataclasses import dataclass


@dataclass(eq=False)
class _Waiter:
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    granted: bool = False


class Admission:
    """``acquire`` → True when the caller may run (then ``release``), False when it must get a 503."""

    def __init__(self, max_running: int, max_queued: int, wait_seconds: float) -> None:
        self.max_running = max(1, max_running)
        self.max_queued = max(0, max_queued)
        self.wait_seconds = wait_seconds
        self._lock = threading.Lock()
        self._running = 0
        self._waiters: collections.deque[_Waiter] = collections.deque()

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> bool:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._running < self.max_running and not self._waiters:
                self._running += 1
                return True
            if len(self._waiters) >= self.max_queued:
                return False
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            await asyncio.wait_for(asyncio.shield(waiter.future), self.wait_seconds)
            return True
        except TimeoutError:
            with self._lock:
                if waiter.granted:
                    return True  # the slot arrived as the wait ran out: take it
                self._waiters.remove(waiter)
            return False
        except asyncio.CancelledError:
            with self._lock:
                granted = waiter.granted
                if not granted:
                    self._waiters.remove(waiter)
            if granted:
                self.release()
            raise

    def release(self) -> None:
        with self._lock:
            if self._waiters:
                waiter = self._waiters.popleft()
                waiter.granted = True  # the slot passes on: `_running` stays the same
                waiter.loop.call_soon_threadsafe(_wake, waiter.future)
                return
            self._running -= 1


def _wake(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
