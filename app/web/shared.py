"""What the replicas share besides the database: a Redis server for the rate (``app.web.rate``) and
the run cache (``app.web.runcache``), and what a replica does while it is unreachable.

A shared store is never on the path to a 500 and never makes a request wait long: every call has a
short socket timeout, and after a failure the store is left alone for ``RETRY_SECONDS`` (a
``Breaker``), during which each caller uses its own fallback (the replica's own rate window, no
shared cache). ``/healthz`` reports each store's state (``health``), probing it when asked.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

log = logging.getLogger(__name__)

TIMEOUT_SECONDS = 0.5  # one Redis call, connecting included: a loopback or LAN round trip is ~0.2 ms
RETRY_SECONDS = 2.0  # after a failure, the store is not asked again for this long


def redis_options() -> dict[str, Any]:
    """redis-py's client options for a shared store: short timeouts, and one immediate retry (a
    pooled connection that the server closed, after it restarted, fails once and is replaced);
    redis-py's default would back off for seconds."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {"socket_timeout": TIMEOUT_SECONDS, "socket_connect_timeout": TIMEOUT_SECONDS,
            "retry": Retry(NoBackoff(), 1), "health_check_interval": 30}


def redacted(url: str) -> str:
    """A store's URL as /healthz and the log may show it: without a password."""
    scheme, sep, rest = url.partition("://")
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return scheme + sep + rest


class Breaker:
    """The state of one shared store, for the callers that use it and for ``/healthz``."""

    def __init__(self, what: str, url: str) -> None:
        self.what, self.url = what, redacted(url)
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self.error: str | None = None
        self.since = 0.0  # when the current outage began (wall clock), 0 while reachable
        self.failures = 0  # calls that failed, since the start

    def allows(self) -> bool:
        """Whether to ask the store now (not while it is resting after a failure)."""
        return time.monotonic() >= self._retry_at

    def failed(self, error: BaseException) -> None:
        with self._lock:
            self.failures += 1
            self._retry_at = time.monotonic() + RETRY_SECONDS
            first = self.error is None
            self.error = f"{type(error).__name__}: {error}"[:300]
            if first:
                self.since = time.time()
        if first:
            log.warning("%s store %s unreachable: %s", self.what, self.url, self.error)

    def succeeded(self) -> None:
        if self.error is None:
            return
        with self._lock:
            recovered, self.error, self.since = self.error is not None, None, 0.0
        if recovered:
            log.warning("%s store %s reachable again", self.what, self.url)

    def health(self) -> dict[str, Any]:
        state: dict[str, Any] = {"url": self.url, "ok": self.error is None}
        if self.error is not None:
            state["error"] = self.error
            state["down_seconds"] = round(time.time() - self.since, 1)
        return state
