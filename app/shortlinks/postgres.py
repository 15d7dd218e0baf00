"""Short links in PostgreSQL: every replica that names the same ``DATABASE_URL`` serves the same links."""

from __future__ import annotations

import threading

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from app.shortlinks.ids import DEFAULT_LENGTH
from app.shortlinks.store import SCHEMA_COLUMNS, LinkStore, StoreUnavailable

# Any constant: serialises CREATE TABLE IF NOT EXISTS between replicas starting at once, which
# otherwise can fail with a unique violation in PostgreSQL's catalogue.
_SCHEMA_LOCK_KEY = 0x5E_A6_11_4C


class PostgresLinkStore(LinkStore):
    backend = "postgresql"

    def __init__(self, url: str, pool_size: int = 4, id_length: int = DEFAULT_LENGTH) -> None:
        super().__init__(id_length)
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
                    db.execute(f"CREATE TABLE IF NOT EXISTS short_links ({SCHEMA_COLUMNS})")
            except (PoolTimeout, psycopg.OperationalError) as error:
                reason = type(error).__name__
                raise StoreUnavailable(f"Cannot reach the short-link database ({reason}).") from None
            self._ready = True

    def _query(self, sql: str, params: tuple) -> list[tuple]:
        self._ensure_ready()
        try:
            with self._pool.connection() as db:
                cursor = db.execute(sql, params)
                return cursor.fetchall() if cursor.description else [(cursor.rowcount,)]
        except (PoolTimeout, psycopg.OperationalError) as error:
            raise StoreUnavailable(f"The short-link database failed ({type(error).__name__}).") from None

    def _id_for_digest(self, digest: str) -> str | None:
        rows = self._query("SELECT id FROM short_links WHERE digest = %s", (digest,))
        return rows[0][0] if rows else None

    def _code_for_id(self, link_id: str) -> str | None:
        rows = self._query("SELECT code FROM short_links WHERE id = %s", (link_id,))
        return rows[0][0] if rows else None

    def _insert(self, link_id: str, digest: str, code: str) -> bool:
        rows = self._query(
            "INSERT INTO short_links (id, digest, code) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (link_id, digest, code),
        )
        return rows[0][0] == 1

    def close(self) -> None:
        self._pool.close()
