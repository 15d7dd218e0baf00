"""Backpressure in front of the sandbox: a bounded number of runs, a bounded queue, a per-client rate.

Loop-agnostic on purpose (a lock and futures woken with ``call_soon_threadsafe``): test clients run
each request in a loop of their own, and the pool itself lives in threads.
"""

from __future__ import annotations

import asyncio
import collections
import math
import threading
import time
from dataclasses import dataclass, field


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


@dataclass
class _Bucket:
    tokens: float
    stamp: float = field(default_factory=time.monotonic)


class RateLimiter:
    """A token bucket per client: ``burst`` runs at once, refilled at ``per_minute``."""

    MAX_CLIENTS = 10_000

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = max(1, burst)
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def take(self, client: str, cost: int = 1) -> float:
        """0 when the client may run now (``cost`` runs at once: a compare is two), else the seconds
        until it may. A cost above the burst costs the whole burst: it could never be paid otherwise."""
        cost = max(1, min(cost, self.burst))
        now = time.monotonic()
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                if len(self._buckets) >= self.MAX_CLIENTS:
                    self._prune(now)
                bucket = self._buckets[client] = _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.stamp) * self.rate)
            bucket.stamp = now
            if bucket.tokens >= cost:
                bucket.tokens -= cost
                return 0.0
            return (cost - bucket.tokens) / self.rate if self.rate > 0 else math.inf

    def _prune(self, now: float) -> None:
        # Forget clients whose bucket has refilled: they are indistinguishable from new ones.
        full = [k for k, b in self._buckets.items() if b.tokens + (now - b.stamp) * self.rate >= self.burst]
        for key in full:
            del self._buckets[key]
        if len(self._buckets) >= self.MAX_CLIENTS:
            self._buckets.clear()
