"""Fixtures for the embed tests: the app with its default runner, and a second origin for the browser.

The API tests run the real app (``create_app`` with the default sandboxed runner, as served) in a
TestClient; the browser tests reuse tests/ui's real server and Debian's chromium, and serve the
"docs page" that embeds the explorer from a second local HTTP server on another port (another
origin, as a docs site is).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.bench.docs_site import DocsSite
from app.config import Settings
from app.web.main import create_app


@pytest.fixture(scope="session")
def client(tmp_path_factory) -> Iterator[TestClient]:
    settings = Settings(data_dir=tmp_path_factory.mktemp("embed-data"))
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def docs_site() -> Iterator[DocsSite]:
    site = DocsSite()
    yield site
    site.close()
