"""The storage contract and the content-addressed insert, shared by the SQLite and PostgreSQL stores."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from app.shortlinks.ids import DEFAULT_LENGTH, candidates, is_valid_id
from app.shortlinks.snippets import Snippet

if TYPE_CHECKING:
    from app.config import Settings

SCHEMA_COLUMNS = """
    id         TEXT PRIMARY KEY,
    digest     TEXT NOT NULL UNIQUE,
    code       TEXT NOT NULL,
    created_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP
"""


class StoreUnavailable(RuntimeError):
    """The database cannot be reached or used right now (the API answers 503)."""


class LinkStore(ABC):
    """Immutable snippets keyed by an id derived from their content.

    There is no update or delete: a stored id always resolves to the same code, on every replica.
    """

    def __init__(self, id_length: int = DEFAULT_LENGTH) -> None:
        self.id_length = id_length

    def put(self, snippet: Snippet) -> tuple[str, bool]:
        """Store ``snippet`` (already checked by ``prepare_snippet``); return (id, newly created)."""
        digest = snippet.digest.hex()
        existing = self._id_for_digest(digest)
        if existing is not None:
            return existing, False
        for candidate in candidates(snippet.digest, self.id_length):
            # INSERT ... ON CONFLICT DO NOTHING: concurrent writers of the same code race safely,
            # and an id already held by different code is left alone.
            if self._insert(candidate, digest, snippet.code):
                return candidate, True
            existing = self._id_for_digest(digest)
            if existing is not None:  # another writer stored this very code a moment ago
                return existing, False
            # The prefix belongs to other code: a collision. Try the next, longer prefix.
        raise StoreUnavailable("No free id for this snippet (a full SHA-256 collision?).")

    def get(self, link_id: str) -> str | None:
        """The code stored under ``link_id``, or None."""
        if not is_valid_id(link_id):
            return None
        return self._code_for_id(link_id)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the store may not be used afterwards."""

    @abstractmethod
    def _id_for_digest(self, digest: str) -> str | None: ...

    @abstractmethod
    def _code_for_id(self, link_id: str) -> str | None: ...

    @abstractmethod
    def _insert(self, link_id: str, digest: str, code: str) -> bool:
        """Insert unless the id or the digest exists; True when a row was inserted."""

    @property
    @abstractmethod
    def backend(self) -> str:
        """``sqlite`` or ``postgresql``, for /healthz and logs (never the URL: it may hold a password)."""


def open_store(settings: Settings) -> LinkStore:
    """The store the settings name. Connections open lazily, so start-up never waits on a database."""
    url = (settings.database_url or "").strip()
    if not url:
        from app.shortlinks.sqlite import SqliteLinkStore

        return SqliteLinkStore(settings.data_dir / "links.sqlite3")
    scheme = url.split(":", 1)[0].lower()
    if scheme in ("postgresql", "postgres"):
        from app.shortlinks.postgres import PostgresLinkStore

        return PostgresLinkStore(url, pool_size=settings.database_pool_size)
    raise ValueError(f"DATABASE_URL must start with postgresql:// (got a {scheme!r} URL).")
