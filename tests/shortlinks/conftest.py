"""Fixtures: a short-link store of each kind, on a real SQLite file and a real PostgreSQL server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pg_server as postgres
import pytest

from app.config import Settings
from app.shortlinks import LinkStore, open_store

BACKENDS = ["sqlite", "postgresql"]


def unavailable(reason: str) -> None:
    # In CI a missing PostgreSQL is a broken setup, not a reason to skip half the tests.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"PostgreSQL is required under CI=true: {reason}", pytrace=False)
    pytest.skip(f"PostgreSQL unavailable: {reason}")


@pytest.fixture(scope="session")
def pg_admin_url() -> Iterator[str]:
    url = os.environ.get("EXPLORER_TEST_DATABASE_URL", "").strip()
    if url:
        try:
            postgres.check(url)
        except postgres.PostgresUnavailable as error:
            unavailable(str(error))
        yield url
        return
    try:
        cluster = postgres.private_cluster()
        url = cluster.__enter__()
    except postgres.PostgresUnavailable as error:
        unavailable(str(error))
    try:
        yield url
    finally:
        cluster.__exit__(None, None, None)


@pytest.fixture
def pg_url(pg_admin_url: str) -> Iterator[str]:
    with postgres.fresh_database(pg_admin_url) as url:
        yield url


@pytest.fixture(params=BACKENDS)
def backend_settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings naming a fresh SQLite folder or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return Settings(data_dir=tmp_path / "data", database_url=None)
    return Settings(data_dir=tmp_path / "unused", database_url=request.getfixturevalue("pg_url"))


@pytest.fixture
def store(backend_settings: Settings) -> Iterator[LinkStore]:
    links = open_store(backend_settings)
    try:
        yield links
    finally:
        links.close()
