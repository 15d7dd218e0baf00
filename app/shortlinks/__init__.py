"""Short links: content-addressed, immutable snippet storage behind ``/s/<id>``.

SQLite in a data folder by default; PostgreSQL when ``DATABASE_URL`` names one, so replicas share links.
"""

from app.shortlinks.snippets import InvalidSnippet, Snippet, prepare_snippet
from app.shortlinks.store import Limits, LinkStore, QuotaExceeded, StoreFull, StoreUnavailable, open_store

__all__ = ["InvalidSnippet", "Limits", "LinkStore", "QuotaExceeded", "Snippet", "StoreFull",
           "StoreUnavailable", "open_store", "prepare_snippet"]
