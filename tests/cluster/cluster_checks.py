"""What the cluster tests share: assertions, and the rule for a missing service."""

from __future__ import annotations

import os
import time

import httpx
import pytest

from app.bench.cluster_kit import server_timing
from app.web import after

SETTLE_SECONDS = 60  # a ceiling only: the waits below end as soon as what they wait for is there


def assert_answered_from_cache(ran: httpx.Response, served: httpx.Response) -> None:
    """``ran`` made a run; ``served`` is the same request answered from the run cache: no sandbox time,
    the run's own time as the time saved, and the very same bytes."""
    assert ran.status_code == served.status_code == 200
    assert "sandbox" in server_timing(ran) and "saved" not in server_timing(ran)
    assert 'cache;desc="miss"' in ran.headers["server-timing"]
    assert "sandbox" not in server_timing(served) and 'cache;desc="hit"' in served.headers["server-timing"]
    assert server_timing(served)["saved"] == server_timing(ran)["sandbox"]
    assert served.content == ran.content


def assert_no_run(response: httpx.Response) -> None:
    """Answered 200 from a trace the run cache had: no sandbox time, and the time saved said."""
    assert response.status_code == 200, response.text[:300]
    assert "sandbox" not in server_timing(response) and "saved" in server_timing(response)


def settled() -> None:
    """Wait until the server in this process (a ``TestClient``'s) has run the jobs it left for after
    its answers (``app.web.after``), the run cache's keeping of a trace or a drawing among them. They
    run beside the sending, after the answer's garbage is freed, so on a busy machine the client's next
    request comes before them: a test that asks again and expects the cache waits for them first."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while after._running:  # the started jobs, each dropped as it ends
        assert time.monotonic() < deadline, "the jobs left for after the answers did not end"
        time.sleep(0.01)


def shared_cache_bytes(client: httpx.Client) -> int:
    """What a replica's shared run cache (Redis) holds, as its ``/healthz`` says."""
    return client.get("/healthz").json()["cache"]["shared"]["bytes"]


def kept_in_shared_cache(client: httpx.Client, before: int) -> None:
    """Wait until the shared run cache holds more than ``before`` bytes: a replica keeps a run beside
    the sending of its answer, so another replica asked at once may come before it."""
    deadline = time.monotonic() + SETTLE_SECONDS
    while shared_cache_bytes(client) <= before:
        assert time.monotonic() < deadline, "the run was not kept in the shared cache"
        time.sleep(0.05)


def unavailable(reason: str) -> None:
    """A Debian service the tests need is missing: in CI a broken setup (.ci/run installs them), a
    failure; elsewhere a skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
