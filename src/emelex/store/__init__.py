"""Durable history: an embedded SQLite store (one transaction per committed turn)."""

from emelex.store._errors import SessionExists, SessionNotFound, StoreCorrupt, StoreError
from emelex.store._sqlite import (
    SCHEMA_VERSION,
    SessionSummary,
    SqliteStore,
    StoredSession,
    open_sqlite_store,
)

__all__ = [
    "SCHEMA_VERSION",
    "SessionExists",
    "SessionNotFound",
    "SessionSummary",
    "SqliteStore",
    "StoreCorrupt",
    "StoreError",
    "StoredSession",
    "open_sqlite_store",
]
