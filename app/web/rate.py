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
import time
from typing import Any

from fastapi.concurrency import run_in_threadpool
from limits import RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import MemoryStorage, storage_from_string
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
        self.local = MovingWindowRateLimiter(MemoryStorage())
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
        if self.local.hit(self.item, client, cost=cost):
            return 0.0
        return self._wait(self.local, client)

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
