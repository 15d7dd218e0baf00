"""Fixtures of the cluster tests: a real Redis server (Debian's), and PostgreSQL from the short-link tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "shortlinks"))

from redis_server import RedisServer, redis_server  # noqa: E402


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server
