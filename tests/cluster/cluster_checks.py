"""What the cluster tests share: assertions, and the rule for a missing service."""

from __future__ import annotations

import os

import httpx
import pytest

from app.bench.cluster_kit import server_timing


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


def unavailable(reason: str) -> None:
    """A Debian service the tests need is missing: in CI a broken setup (.ci/run installs them), a
    failure; elsewhere a skip."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)
