"""Short links in PostgreSQL: every replica that names the same ``DATABASE_URL`` serves the same links."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from app.shortlinks.ids import DEFAULT_LENGTH
from app.shortlinks.store import Limits, LinkStore, StoreUnavailable, Tx

# Any constant: serialises the schema's creation between replicas starting at once, which otherwise
# can fail with a unique violation in PostgreSQL's catalogue.
_SCHEMA_LOCK_KEY = 0x5E_A6_11_4C


class _PostgresTx(Tx):
    def __init__(self, connection: psycopg.Connection) -> None:
        self.connection = connection

    def rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        cursor = self.connection.execute(sql.replace("?", "%s"), params)
        return cursor.fetchall() if cursor.description else []

    def run(self, sql: str, params: tuple = ()) -> int:
        cursor = self.connection.execute(sql.replace("?", "%s"), params)
        if cursor.description:  # (a statement with RETURNING)
            return len(cursor.fetchall())
        return cursor.rowcount


class PostgresLinkStore(LinkStore):
    backend = "postgresql"
    LOCK = " FOR UPDATE"
    SKIP = " FOR UPDATE SKIP LOCKED"
    SIZE = "octet_length(code)"

    def __init__(self, url: str, pool_size: int = 4, id_length: int = DEFAULT_LENGTH,
                 limits: Limits | None = None) -> None:
        super().__init__(id_length, limits)
        # A small bounded pool per process: a viral link must not open one connection per request.
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=max(1, pool_size),
            open=False,
            timeout=5,
            kwargs={"autocommit": True, "connect_timeout": 5, "application_name": "autograd-explorer"},
            name="short-links",
        )
        self._ready = False
        self._lock = threading.Lock()

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        with self._lock:
            if self._ready:
                return
            # No waiting here: the pool keeps (re)connecting in the background, and each request
            # waits at most the pool's timeout for a connection, then answers 503.
            self._pool.open(wait=False)
            try:
                with self._pool.connection() as db, db.transaction():
                    db.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK_KEY,))
                    columns = {row[0] for row in db.execute(
                        "SELECT column_name FROM information_schema.columns WHERE table_name = 'short_links' "
                        "AND table_schema = current_schema()").fetchall()}
                    self._prepare(_PostgresTx(db), columns)
            except (PoolTimeout, psycopg.OperationalError) as error:
                reason = type(error).__name__
                raise StoreUnavailable(f"Cannot reach the short-link database ({reason}).") from None
            self._ready = True

    @contextmanager
    def _transaction(self, write: bool = True) -> Iterator[Tx]:
        self._ensure_ready()
        try:
            with self._pool.connection() as db, db.transaction():
                yield _PostgresTx(db)
        except (PoolTimeout, psycopg.OperationalError) as error:
            raise StoreUnavailable(f"The short-link database failed ({type(error).__name__}).") from None

    def close(self) -> None:
        self._pool.close()
