"""The per-client rate of runs and shares (429), counted by ``limits`` in a moving window.

A client may spend ``burst`` in any window of ``burst / per_minute`` minutes (``burst`` unset: a
minute's worth, so ``per_minute`` in any minute; the default: 120 in any minute); a compare costs
two. The window is kept in ``EXPLORER_RATE_STORAGE``:

* ``memory://`` (the default): this process's own, for a single server;
* ``redis://host:port/db``: shared by every replica, so a client has one budget whichever replica
  the load balancer sends it to.

While Redis is unreachable the limit fails *open to the replica*: each replica counts the same
budget in its own memory (a client can then spend it once per replica, as with ``memory://`` on
every one), runs go on, and ``/healthz`` says ``"shared": false`` with the error. A timeout-bounded
call and a rest after each failure (``app.web.shared.Breaker``) keep a dead Redis from slowing
requests. Failing closed would turn a cache-and-counter outage into a site outage; failing wide open
would lift every limit; the replica's own window keeps each replica's bound.

The client's tokens are taken before any body is read (``app.web.gates.take_token``).
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import Any

from fastapi.concurrency import run_in_threadpool
from limits import RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from app.web.shared import Breaker, redis_options

log = logging.getLogger(__name__)
YEAR = 365 * 24 * 3600


class RateLimiter:
    """``take(client, cost)`` → 0 when the client may go on, else the seconds until it may."""

    def __init__(self, per_minute: float, burst: int | None, storage: str = "memory://") -> None:
        self.burst = max(1, math.ceil(per_minute) if burst is None else burst)
        window = math.ceil(self.burst * 60 / per_minute) if per_minute > 0 else YEAR
        self.item = RateLimitItemPerSecond(self.burst, max(1, min(window, YEAR)))
        self.local = _Window(self.burst, self.item.get_expiry())
        self.storage = storage
        self.shared: MovingWindowRateLimiter | None = None
        self.breaker: Breaker | None = None
        if not storage.startswith("memory://"):
            if not storage.startswith(("redis://", "rediss://", "redis+unix://")):
                raise ValueError(f"EXPLORER_RATE_STORAGE: {storage!r} is neither memory:// nor redis://...")
            shared = storage_from_string(storage, wrap_exceptions=True, key_prefix="explorer-rate",
                                         **redis_options())
            self.shared = MovingWindowRateLimiter(shared)
            self.breaker = Breaker("rate", storage)

    @property
    def window_seconds(self) -> int:
        return self.item.get_expiry()

    def take(self, client: str, cost: int = 1) -> float:
        """Blocking (a Redis round trip): from the event loop, ``atake``. A cost above the burst costs
        the whole burst: it could never be paid otherwise."""
        cost = max(1, min(cost, self.burst))
        if self.shared is not None and self.breaker is not None and self.breaker.allows():
            try:
                allowed = self.shared.hit(self.item, client, cost=cost)
                wait = 0.0 if allowed else self._wait(self.shared, client)
            except StorageError as error:
                self.breaker.failed(error.storage_error)
            else:
                self.breaker.succeeded()
                return wait
        if self.local.hit(client, cost, time.time()):
            return 0.0
        return max(0.5, self.local.reset(client) - time.time())

    async def atake(self, client: str, cost: int = 1) -> float:
        if self.shared is None or self.breaker is None or not self.breaker.allows():
            return self.take(client, cost)  # in memory: no need for a thread
        return await run_in_threadpool(self.take, client, cost)

    def _wait(self, limiter: MovingWindowRateLimiter, client: str) -> float:
        """Seconds until the window's oldest hit leaves it (at least a moment: the caller refuses)."""
        reset = limiter.get_window_stats(self.item, client).reset_time
        return max(0.5, reset - time.time())

    def health(self) -> dict[str, Any]:
        """``/healthz``'s word on the rate: where it is counted, and whether that is shared now. Asks
        Redis (a ping, bounded by the store's timeout): blocking."""
        state: dict[str, Any] = {"storage": self.storage.split("://")[0], "limit": self.burst,
                                 "window_seconds": self.window_seconds}
        if self.shared is None or self.breaker is None:
            return {**state, "shared": False}
        if self.shared.storage.check():
            self.breaker.succeeded()
        else:
            self.breaker.failed(ConnectionError("no answer to PING"))
        shared = self.breaker.error is None
        return {**state, **self.breaker.health(), "shared": shared,
                **({} if shared else {"fallback": "per replica"})}


class _Window:
    """The moving window in this process's memory (``memory://``, and a replica's own while Redis is
    down): each client's hits of the last ``seconds``, with their costs. Not ``limits``'
    ``MemoryStorage``: it starts a timer thread on every hit that comes 10 ms after the last one's
    (every request of a steady stream: a thread made and run per request, on the request's path)."""

    SWEEP_EVERY = 1024  # takes between drops of the clients whose last hit has left the window

    def __init__(self, limit: int, seconds: float) -> None:
        self.limit, self.seconds = limit, seconds
        self._hits: dict[str, deque[tuple[float, int]]] = {}  # oldest first
        self._spent: dict[str, int] = {}
        self._lock = threading.Lock()
        self._takes = 0

    def hit(self, client: str, cost: int, now: float) -> bool:
        """Spend ``cost`` at ``now`` if the window has room for it."""
        with self._lock:
            self._takes += 1
            if self._takes % self.SWEEP_EVERY == 0:
                self._sweep(now)
            hits = self._hits.setdefault(client, deque())
            spent = self._expire(client, hits, now)
            if spent + cost > self.limit:
                return False
            hits.append((now, cost))
            self._spent[client] = spent + cost
            return True

    def reset(self, client: str) -> float:
        """When the client's oldest hit in the window leaves it (now, when it has none)."""
        with self._lock:
            hits = self._hits.get(client)
            return hits[0][0] + self.seconds if hits else time.time()

    def _expire(self, client: str, hits: deque[tuple[float, int]], now: float) -> int:
        spent = self._spent.get(client, 0)
        while hits and hits[0][0] <= now - self.seconds:
            spent -= hits.popleft()[1]
        return spent

    def _sweep(self, now: float) -> None:
        for client in [c for c, hits in self._hits.items() if not hits or hits[-1][0] <= now - self.seconds]:
            del self._hits[client]
            self._spent.pop(client, None)
