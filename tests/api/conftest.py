"""One app for the API tests, with whatever runner ``create_app`` installs by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.web.main import create_app


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A client of the real app; entering it runs the lifespan, which starts the runner."""
    data_dir: Path = tmp_path_factory.mktemp("data")  # keep the link store out of the repository
    with TestClient(create_app(Settings(data_dir=data_dir))) as test_client:
        yield test_client
