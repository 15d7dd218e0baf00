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
from app.shortlinks.store import Limits, LinkStore, StoreUnavailable, Tx


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


class _SqliteTx(Tx):
    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        return self.connection.execute(sql, params).fetchall()

    def run(self, sql: str, params: tuple = ()) -> int:
        cursor = self.connection.execute(sql, params)
        if cursor.description:  # (a statement with RETURNING)
            return len(cursor.fetchall())
        return cursor.rowcount


class SqliteLinkStore(LinkStore):
    backend = "sqlite"
    SIZE = "length(CAST(code AS BLOB))"

    def __init__(self, path: Path, id_length: int = DEFAULT_LENGTH, limits: Limits | None = None) -> None:
        super().__init__(id_length, limits)
        self.path = Path(path)
        self._ready = False
        self._lock = threading.Lock()

    @contextmanager
    def _transaction(self, write: bool = True) -> Iterator[Tx]:
        # A connection per operation: cheap for SQLite, and safe across FastAPI's worker threads. A
        # writer takes the database's write lock at once (BEGIN IMMEDIATE), so the quota, the total
        # and the insert of one share are one step for every process on the host.
        self._ensure_schema()
        try:
            connection = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        except sqlite3.Error as error:
            raise StoreUnavailable(f"Cannot open the short-link database: {error}.") from error
        try:
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            yield _SqliteTx(connection)
            connection.execute("COMMIT")
        except sqlite3.OperationalError as error:  # locked for too long, disk full, read-only...
            raise StoreUnavailable(f"The short-link database failed: {error}.") from error
        finally:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
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
            # WAL lets readers in other processes carry on while one writes. Switching needs a moment
            # alone with the file and SQLite does not wait for it (SQLITE_BUSY at once), so retry
            # briefly when a second process starts at the same time; WAL, once set, stays set.
            for attempt in range(100):
                try:
                    connection.execute("PRAGMA journal_mode=WAL")
                    break
                except sqlite3.OperationalError as error:
                    if "locked" not in str(error) or attempt == 99:
                        raise
                    time.sleep(0.05)
            connection.execute("BEGIN IMMEDIATE")
            try:
                columns = {row[1] for row in connection.execute("PRAGMA table_info(short_links)")}
                self._prepare(_SqliteTx(connection), columns)
                connection.execute("COMMIT")
            finally:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
        finally:
            connection.close()
