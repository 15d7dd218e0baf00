"""Only the server's uid may read the links: the data folder is created 0700, the database 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from app.config import Settings
from app.shortlinks import open_store, prepare_snippet


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_data_folder_and_database_are_private(tmp_path: Path) -> None:
    old = os.umask(0o022)  # a permissive umask must not matter
    try:
        data = tmp_path / "nested" / "data"
        store = open_store(Settings(data_dir=data, database_url=None))
        store.put(prepare_snippet("x = torch.ones(2)", 20480), "192.0.2.1")
        store.close()
    finally:
        os.umask(old)
    assert _mode(data) == 0o700
    files = [p for p in data.iterdir() if p.name.startswith("links.sqlite3")]
    assert files and all(_mode(p) == 0o600 for p in files), {p.name: oct(_mode(p)) for p in files}


def test_an_existing_world_readable_store_is_made_private(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "links.sqlite3").touch(mode=0o644)
    os.chmod(data / "links.sqlite3", 0o644)
    store = open_store(Settings(data_dir=data, database_url=None))
    store.put(prepare_snippet("y = 1", 20480), "192.0.2.1")
    store.close()
    assert _mode(data) == 0o700 and _mode(data / "links.sqlite3") == 0o600
