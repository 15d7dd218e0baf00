"""Fixtures of the cluster tests: real Debian services (redis-server, haproxy) and PostgreSQL (as the
short-link tests get it: CI's server, else a private cluster of our own)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_checks import unavailable

from app.bench.cluster_kit import Missing, Redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shortlinks"))
import pg_server as postgres  # noqa: E402


@pytest.fixture
def redis() -> Iterator[Redis]:
    try:
        server = Redis()
    except Missing as error:
        unavailable(str(error))
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database for the module."""
    url = os.environ.get("EXPLORER_TEST_DATABASE_URL", "").strip()
    try:
        if url:
            postgres.check(url)
            with postgres.fresh_database(url) as fresh:
                yield fresh
            return
        with postgres.private_cluster() as admin, postgres.fresh_database(admin) as fresh:
            yield fresh
    except postgres.PostgresUnavailable as error:
        unavailable(f"PostgreSQL unavailable: {error}")
