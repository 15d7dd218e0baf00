"""Short links in a SQLite file: the default, for one server process or a few on one host."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.shortlinks.ids import DEFAULT_LENGTH
from app.shortlinks.store import SCHEMA_COLUMNS, LinkStore, StoreUnavailable


def _private_file(path: Path) -> None:
    """The data folder 0700 and the database 0600 (SQLite's -wal/-shm files copy the database's
    mode): only the server's own uid may read the links, whatever the umask."""
    folder = path.parent
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid == os.geteuid():
        folder.chmod(0o700)
    os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600))
    if path.stat().st_uid == os.geteuid():
        path.chmod(0o600)


class SqliteLinkStore(LinkStore):
    backend = "sqlite"

    def __init__(self, path: Path, id_length: int = DEFAULT_LENGTH) -> None:
        super().__init__(id_length)
        self.path = Path(path)
        self._ready = False
        self._lock = threading.Lock()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        # A connection per operation: cheap for SQLite, and safe across FastAPI's worker threads.
        self._ensure_schema()
        try:
            connection = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        except sqlite3.Error as error:
            raise StoreUnavailable(f"Cannot open the short-link database: {error}.") from error
        try:
            yield connection
        except sqlite3.OperationalError as error:  # locked for too long, disk full, read-only...
            raise StoreUnavailable(f"The short-link database failed: {error}.") from error
        finally:
            connection.close()

    def _ensure_schema(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            try:
                _private_file(self.path)
                self._create_schema()
            except (OSError, sqlite3.Error) as error:
                raise StoreUnavailable(f"Cannot prepare the short-link database: {error}.") from error
            self._ready = True

    def _create_schema(self) -> None:
        connection = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            connection.execute(f"CREATE TABLE IF NOT EXISTS short_links ({SCHEMA_COLUMNS})")
            # WAL lets readers in other processes carry on while one writes. Switching needs a moment
            # alone with the file and SQLite does not wait for it (SQLITE_BUSY at once), so retry
            # briefly when a second process starts at the same time; WAL, once set, stays set.
            for attempt in range(100):
                try:
                    connection.execute("PRAGMA journal_mode=WAL")
                    return
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or attempt == 99:
                        raise
                    time.sleep(0.05)
        finally:
            connection.close()

    def _id_for_digest(self, digest: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT id FROM short_links WHERE digest = ?", (digest,)).fetchone()
        return row[0] if row else None

    def _code_for_id(self, link_id: str) -> str | None:
        with self._connect() as db:
            row = db.execute("SELECT code FROM short_links WHERE id = ?", (link_id,)).fetchone()
        return row[0] if row else None

    def _insert(self, link_id: str, digest: str, code: str) -> bool:
        with self._connect() as db:
            cursor = db.execute(
                "INSERT INTO short_links (id, digest, code) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                (link_id, digest, code),
            )
            return cursor.rowcount == 1
