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
    with pytest.MonkeyPatch.context() as patch:
        # A real server never imports torch; this test process may have (the engine tests), and
        # torch leaves TORCHINDUCTOR_CACHE_DIR in os.environ. The sandbox would take the same
        # variable, set by torch inside its children, for the server's environment leaking in.
        patch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        with TestClient(create_app(Settings(data_dir=data_dir))) as test_client:
            yield test_client
