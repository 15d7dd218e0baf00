"""The storage contract and the insert with its bounds, shared by the SQLite and PostgreSQL stores.

A snippet is stored once, under an id derived from its content, and a stored id always resolves to
the same code, on every replica. What one can store is bounded (``Limits``):

* all snippets together (``max_bytes``): past it, nothing new is stored (``StoreFull``);
* what one client shares in a day (``client_bytes``, ``client_links``; the client is
  ``app.web.clients.client_key``'s, the same key as the rate limit's): ``QuotaExceeded``;
* a link never opened (``GET``) is deleted ``unopened_seconds`` after it was last shared; a link
  once opened is kept.

Sharing a snippet answers the same whether it was stored already or not: the same id, the same
charge to the client's quota, the same refreshed expiry. And ids are keyed with a secret the store
keeps (HMAC-SHA-256, not the bare SHA-256 of the code), so no one can work out a snippet's id, and
ask whether it is stored, without sharing it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.shortlinks.ids import DEFAULT_LENGTH, candidates, is_valid_id
from app.shortlinks.snippets import Snippet

if TYPE_CHECKING:
    from app.config import Settings

DAY = 24 * 3600.0
SWEEP_ROWS = 100  # expired links deleted per share at most (the rest by the next ones)

# ``{size}`` is the backend's byte length of a text column; times are seconds since the epoch,
# written by the server (the tests choose their own ``now``).
TABLES = (
    """CREATE TABLE IF NOT EXISTS short_links (
        id         TEXT PRIMARY KEY,
        digest     TEXT NOT NULL UNIQUE,
        code       TEXT NOT NULL,
        created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
    )""",
    # one row: the key of the ids, and the bytes of every snippet stored
    """CREATE TABLE IF NOT EXISTS short_link_state (
        k      INTEGER PRIMARY KEY CHECK (k = 1),
        secret TEXT NOT NULL,
        bytes  BIGINT NOT NULL
    )""",
    # what each client shared since ``since`` (the client as a keyed hash; a day's row at most)
    """CREATE TABLE IF NOT EXISTS short_link_quota (
        client TEXT PRIMARY KEY,
        since  DOUBLE PRECISION NOT NULL,
        bytes  BIGINT NOT NULL,
        links  INTEGER NOT NULL
    )""",
)
# Added to tables made before the bounds (links made then count as opened: they are kept).
COLUMNS = (("size", "BIGINT"), ("shared_at", "DOUBLE PRECISION"), ("opened_at", "DOUBLE PRECISION"))
INDEX = ("CREATE INDEX IF NOT EXISTS short_links_unopened ON short_links (shared_at) "
         "WHERE opened_at IS NULL")


class StoreUnavailable(RuntimeError):
    """The database cannot be reached or used right now (the API answers 503)."""


class QuotaExceeded(Exception):  # noqa: N818 - says what happened
    """The client shared as much as a day allows; ``retry_after`` seconds until it may again."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"quota exceeded for {retry_after:.0f} s")
        self.retry_after = retry_after


class StoreFull(Exception):  # noqa: N818
    """All snippets together hold ``Limits.max_bytes``: nothing new is stored."""


@dataclass(frozen=True)
class Limits:
    max_bytes: int = 256 << 20
    client_bytes: int = 1 << 20
    client_links: int = 200
    unopened_seconds: float = 14 * DAY

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(settings.links_max_bytes, settings.links_client_bytes, settings.links_client_links,
                   settings.links_unopened_days * DAY)


class Tx(ABC):
    """One transaction's statements, with ``?`` placeholders."""

    @abstractmethod
    def rows(self, sql: str, params: tuple = ()) -> list[tuple]: ...

    @abstractmethod
    def run(self, sql: str, params: tuple = ()) -> int:
        """The statement's row count."""

    def one(self, sql: str, params: tuple = ()) -> tuple | None:
        found = self.rows(sql, params)
        return found[0] if found else None


class LinkStore(ABC):
    """Immutable snippets keyed by an id derived from their content (see the module)."""

    LOCK = ""  # appended to a SELECT whose rows the transaction goes on to change (PostgreSQL's FOR UPDATE)
    SKIP = ""  # and to one whose locked rows may be left to another transaction
    SIZE = "length(code)"  # bytes of ``code`` as the backend counts them

    def __init__(self, id_length: int = DEFAULT_LENGTH, limits: Limits | None = None) -> None:
        self.id_length = id_length
        self.limits = limits or Limits()
        self._secret: bytes | None = None

    # ---- the contract ----------------------------------------------------------------------------

    def put(self, snippet: Snippet, client: str, now: float | None = None) -> tuple[str, bool]:
        """Store ``snippet`` (already checked by ``prepare_snippet``) for ``client``; return (id,
        newly stored). The second is for tests and logs only: the client is answered the same."""
        now = time.time() if now is None else now
        size = len(snippet.code.encode("utf-8"))
        key, who = self._keyed(snippet.digest), self._client(client)  # (the key read before the writing)
        digest = key.hex()
        with self._transaction() as db:
            self._charge(db, who, size, now)
            found = self._refresh(db, digest, now)
            if found is not None:
                return found, False
            self._sweep(db, now)
            (stored,) = db.one(f"SELECT bytes FROM short_link_state WHERE k = 1{self.LOCK}") or (0,)
            if stored + size > self.limits.max_bytes:
                raise StoreFull
            for candidate in candidates(key, self.id_length):
                # ON CONFLICT DO NOTHING: concurrent writers of the same code race safely, and an id
                # already held by different code is left alone.
                if db.run("INSERT INTO short_links (id, digest, code, size, shared_at) "
                          "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                          (candidate, digest, snippet.code, size, now)):
                    db.run("UPDATE short_link_state SET bytes = bytes + ? WHERE k = 1", (size,))
                    return candidate, True
                found = self._refresh(db, digest, now)
                if found is not None:  # another writer stored this very code a moment ago
                    return found, False
                # The prefix belongs to other code: a collision. Try the next, longer prefix.
        raise StoreUnavailable("No free id for this snippet (a full SHA-256 collision?).")

    def get(self, link_id: str, now: float | None = None) -> str | None:
        """The code stored under ``link_id``, or None. The first read marks it opened: kept."""
        if not is_valid_id(link_id):
            return None
        with self._transaction(write=False) as db:
            row = db.one("SELECT code, opened_at FROM short_links WHERE id = ?", (link_id,))
            if row is not None and row[1] is None:
                db.run("UPDATE short_links SET opened_at = ? WHERE id = ? AND opened_at IS NULL",
                       (time.time() if now is None else now, link_id))
        return row[0] if row is not None else None

    def stored_bytes(self) -> int:
        with self._transaction(write=False) as db:
            (stored,) = db.one("SELECT bytes FROM short_link_state WHERE k = 1") or (0,)
        return int(stored)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store may not be used afterwards."""

    @property
    @abstractmethod
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``, for /healthz and logs (never the URL: it may hold a password)."""

    # ---- the steps -------------------------------------------------------------------------------

    def _charge(self, db: Tx, client: str, size: int, now: float) -> None:
        """Count one share of ``size`` bytes against ``client``'s day, or raise ``QuotaExceeded``."""
        db.run("INSERT INTO short_link_quota (client, since, bytes, links) VALUES (?, ?, 0, 0) "
               "ON CONFLICT (client) DO NOTHING", (client, now))
        since, used, links = db.one(f"SELECT since, bytes, links FROM short_link_quota WHERE client = ?"
                                    f"{self.LOCK}", (client,)) or (now, 0, 0)
        if since <= now - DAY:
            since, used, links = now, 0, 0
        limits = self.limits
        if used + size > limits.client_bytes or links + 1 > limits.client_links:
            raise QuotaExceeded(max(since + DAY - now, 1.0))
        db.run("UPDATE short_link_quota SET since = ?, bytes = ?, links = ? WHERE client = ?",
               (since, used + size, links + 1, client))

    def _refresh(self, db: Tx, digest: str, now: float) -> str | None:
        """The id of the code with ``digest``, shared again now (its expiry starts again), or None."""
        row = db.one("SELECT id FROM short_links WHERE digest = ?", (digest,))
        if row is not None:
            db.run("UPDATE short_links SET shared_at = ? WHERE id = ?", (now, row[0]))
        return row[0] if row is not None else None

    def _sweep(self, db: Tx, now: float) -> None:
        """Delete links never opened whose time is up, and quota rows past their day (a few at a time)."""
        freed = db.rows(
            "DELETE FROM short_links WHERE id IN (SELECT id FROM short_links WHERE opened_at IS NULL "
            f"AND shared_at < ? ORDER BY shared_at LIMIT {SWEEP_ROWS}{self.SKIP}) RETURNING size",
            (now - self.limits.unopened_seconds,))
        if freed:
            db.run("UPDATE short_link_state SET bytes = bytes - ? WHERE k = 1",
                   (sum(row[0] or 0 for row in freed),))
        db.run(f"DELETE FROM short_link_quota WHERE client IN (SELECT client FROM short_link_quota "
               f"WHERE since < ? LIMIT {SWEEP_ROWS}{self.SKIP})", (now - DAY,))

    def _keyed(self, digest: bytes) -> bytes:
        return hmac.new(self._key(), digest, hashlib.sha256).digest()

    def _client(self, client: str) -> str:
        """The client as the quota table keeps it: a keyed hash, not the address."""
        named = b"client:" + client.encode("utf-8", "replace")
        return hmac.new(self._key(), named, hashlib.sha256).hexdigest()[:32]

    def _key(self) -> bytes:
        if self._secret is None:
            with self._transaction() as db:
                row = db.one("SELECT secret FROM short_link_state WHERE k = 1")
            if row is None:
                raise StoreUnavailable("The short-link store has no key.")
            self._secret = bytes.fromhex(row[0])
        return self._secret

    def _prepare(self, db: Tx, columns: set[str]) -> None:
        """Create the tables, add the newer columns to an older ``short_links`` (``columns``: the ones
        it has), and make the one state row (the first replica's key wins)."""
        for table in TABLES:
            db.run(table)
        added = [name for name, _ in COLUMNS if name not in columns]
        for name, kind in COLUMNS:
            if name in added:
                db.run(f"ALTER TABLE short_links ADD COLUMN {name} {kind}")
        if added:
            db.run(f"UPDATE short_links SET size = {self.SIZE}, shared_at = ?, opened_at = ? "
                   "WHERE size IS NULL", (time.time(), time.time()))
        db.run(INDEX)
        (stored,) = db.one("SELECT COALESCE(SUM(size), 0) FROM short_links") or (0,)
        db.run("INSERT INTO short_link_state (k, secret, bytes) VALUES (1, ?, ?) ON CONFLICT (k) DO NOTHING",
               (secrets.token_hex(32), int(stored)))

    @abstractmethod
    def _transaction(self, write: bool = True) -> AbstractContextManager[Tx]:
        """A transaction (committed when the block ends, rolled back when it raises); ``write``: it
        may write (SQLite takes its write lock at once)."""


def open_store(settings: Settings) -> LinkStore:
    """The store the settings name. Connections open lazily, so start-up never waits on a database."""
    url = (settings.database_url or "").strip()
    limits = Limits.of(settings)
    if not url:
        from app.shortlinks.sqlite import SqliteLinkStore

        return SqliteLinkStore(settings.data_dir / "links.sqlite3", limits=limits)
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        from app.shortlinks.postgres import PostgresLinkStore

        return PostgresLinkStore(url, pool_size=settings.database_pool_size, limits=limits)
    raise ValueError(f"DATABASE_URL must start with postgresql:// (got a {scheme!r} URL).")
