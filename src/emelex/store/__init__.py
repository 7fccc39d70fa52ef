"""Durable history: an embedded SQLite store (one transaction per committed turn)."""

from emelex.store._sqlite import (
    SCHEMA_VERSION,
    SessionExists,
    SessionNotFound,
    SessionSummary,
    SqliteStore,
    StoredSession,
    StoreError,
    open_sqlite_store,
)

__all__ = [
    "SCHEMA_VERSION",
    "SessionExists",
    "SessionNotFound",
    "SessionSummary",
    "SqliteStore",
    "StoreError",
    "StoredSession",
    "open_sqlite_store",
]
