"""``app.web.rate``: the per-client budget in a moving window, in memory and shared through a real Redis."""

from __future__ import annotations

import threading
import time

from app.bench.cluster_kit import Redis as RedisServer
from app.web import shared
from app.web.rate import RateLimiter


def spend(limiter: RateLimiter, client: str, times: int, cost: int = 1) -> list[bool]:
    return [limiter.take(client, cost) == 0 for _ in range(times)]


def test_memory_budget_per_client_and_cost() -> None:
    limiter = RateLimiter(per_minute=1, burst=3)  # 3 in any 3 minutes
    assert limiter.window_seconds == 180
    assert spend(limiter, "a", 4) == [True, True, True, False]
    wait = limiter.take("a")
    assert 170 < wait <= 180  # until the first hit leaves the window
    assert spend(limiter, "b", 1, cost=2) == [True]  # a compare is two
    assert spend(limiter, "b", 2) == [True, False]
    assert spend(limiter, "c", 1, cost=9) == [True]  # above the burst: the whole burst
    assert spend(limiter, "c", 1) == [False]


def test_the_window_moves() -> None:
    limiter = RateLimiter(per_minute=60, burst=2)  # 2 in any 2 seconds
    assert spend(limiter, "a", 3) == [True, True, False]
    time.sleep(2.2)  # waits for the window; asserts nothing about how long anything took
    assert spend(limiter, "a", 1) == [True]


def test_taking_in_memory_starts_no_thread(monkeypatch) -> None:
    """(``limits``' MemoryStorage started a timer thread on every hit that came 10 ms after the last
    one's: a thread made per request of a steady stream, on its path.) And a client's window is
    dropped once it is empty, so the memory holds only the clients of the last window."""
    limiter = RateLimiter(per_minute=60 * 1000, burst=1000)  # 1,000 in any second
    started = []
    start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda thread: (started.append(thread), start(thread)))
    for index in range(40):
        assert limiter.take(f"client-{index % 4}") == 0
        time.sleep(0.012)
    assert started == []
    limiter.local.SWEEP_EVERY = 1
    time.sleep(1.1)
    limiter.take("last")
    assert set(limiter.local._hits) == {"last"}


def test_replicas_share_one_budget_in_redis(redis: RedisServer) -> None:
    replicas = [RateLimiter(per_minute=1, burst=5, storage=redis.url) for _ in range(2)]
    answers: list[bool] = []
    lock = threading.Lock()

    def client(limiter: RateLimiter) -> None:
        for _ in range(5):
            allowed = limiter.take("203.0.113.7") == 0
            with lock:
                answers.append(allowed)

    threads = [threading.Thread(target=client, args=(limiter,)) for limiter in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers.count(True) == 5 and len(answers) == 10  # not 5 per replica
    assert all(limiter.health()["shared"] for limiter in replicas)
    # in memory, each replica counts alone: the bug this storage fixes
    alone = [RateLimiter(per_minute=1, burst=5) for _ in range(2)]
    assert sum(spend(limiter, "203.0.113.7", 5).count(True) for limiter in alone) == 10


def test_redis_down_falls_back_to_the_replicas_own_window(redis: RedisServer, monkeypatch) -> None:
    monkeypatch.setattr(shared, "RETRY_SECONDS", 0.2)
    limiter = RateLimiter(per_minute=1, burst=2, storage=redis.url)
    assert spend(limiter, "a", 1) == [True]
    redis.stop()
    started = time.monotonic()
    assert spend(limiter, "a", 3) == [True, True, False]  # the replica's own window, from empty
    assert time.monotonic() - started < 5  # bounded by the store's timeout, never a hang
    health = limiter.health()
    assert health["shared"] is False and health["fallback"] == "per replica" and "error" in health
    redis.start()  # back on the same port, empty
    time.sleep(0.3)
    assert limiter.health()["shared"] is True
    assert spend(limiter, "a", 3) == [True, True, False]  # counted in Redis again


def test_without_a_burst_the_budget_is_a_minutes_worth() -> None:
    limiter = RateLimiter(per_minute=3, burst=None)
    assert (limiter.burst, limiter.window_seconds) == (3, 60)
    assert spend(limiter, "a", 4) == [True, True, True, False]
