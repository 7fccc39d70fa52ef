"""The PostgreSQL store's tables, its ``schema_version`` table and forward migrations.

The tables mirror the SQLite store's schema 4 (sessions, events, rows, calls, operations,
patches; its search blocks have no counterpart here) and add what several Hosts on one
database need: ``leases`` (which Host runs a session's work, with a fencing token). A new
database is created at :data:`SCHEMA_VERSION`; an older one is migrated forward in one
transaction; a newer one is refused. Hosts starting together serialize the check on a
transaction-scoped advisory lock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import psycopg

from emelex.store._errors import StoreError
from emelex.store._schema import SCHEMA_VERSION

#: Taken (for the transaction only) while a Host creates or migrates the tables.
_MIGRATION_LOCK: Final = 0x656D656C6578  # "emelex"

#: The channel every commit notifies with ``session_id:last_sequence``.
CHANNEL: Final = "emelex_events"

#: Schema 3: the completed-work patches a session captured (immutable, read by slices).
_PATCHES: Final = """CREATE TABLE IF NOT EXISTS patches (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        patch_id TEXT NOT NULL,
        info TEXT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (session_id, patch_id))"""

_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS schema_version (
        only_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (only_row),
        version INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS sessions (
        id TEXT PRIMARY KEY,
        created_at DOUBLE PRECISION NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        authority TEXT NOT NULL,
        config TEXT NOT NULL,
        turns INTEGER NOT NULL DEFAULT 0,
        title TEXT NOT NULL DEFAULT '',
        last_sequence BIGINT NOT NULL DEFAULT 0)""",
    """CREATE TABLE IF NOT EXISTS events (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        sequence BIGINT NOT NULL,
        kind TEXT NOT NULL,
        turn_id TEXT,
        at DOUBLE PRECISION NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY (session_id, sequence))""",
    """CREATE TABLE IF NOT EXISTS rows (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        source_sequence BIGINT NOT NULL,
        item_index INTEGER NOT NULL,
        turn_id TEXT NOT NULL,
        role TEXT NOT NULL,
        internal BOOLEAN NOT NULL,
        tool_name TEXT,
        tool_call_id TEXT,
        body TEXT NOT NULL,
        thinking TEXT,
        tool_calls TEXT,
        message TEXT NOT NULL,
        PRIMARY KEY (session_id, source_sequence, item_index))""",
    """CREATE TABLE IF NOT EXISTS calls (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        PRIMARY KEY (session_id, call_id))""",
    """CREATE TABLE IF NOT EXISTS operations (
        session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
        reference TEXT NOT NULL,
        digest TEXT NOT NULL,
        sequence BIGINT NOT NULL,
        receipt TEXT NOT NULL,
        PRIMARY KEY (session_id, reference))""",
    # One row per session that some Host has run: the holder, a token that grows by one
    # on every change of holder (every fenced write compares it), and when it lapses.
    """CREATE TABLE IF NOT EXISTS leases (
        session_id TEXT PRIMARY KEY REFERENCES sessions(id) ON DELETE CASCADE,
        holder TEXT NOT NULL,
        token BIGINT NOT NULL,
        expires_at TIMESTAMPTZ NOT NULL)""",
    _PATCHES,
)


#: ``MIGRATIONS[n]`` turns schema ``n`` into ``n + 1`` inside the open transaction.
def _add_patches(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Schema 2 -> 3: the captured completed-work patches (as the SQLite store's)."""
    db.execute(_PATCHES)


def _search_blocks(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Schema 3 -> 4: the SQLite store's search blocks. This store narrows searches
    without them (see ``search_candidates``), so nothing changes here."""


def _search_segment(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Schema 4 -> 5: the SQLite store's search segment (closed blocks' text in a file
    beside it). No search blocks here, so nothing changes."""


def _latin1_blocks(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Schema 5 -> 6: the SQLite store's closed search blocks may be Latin-1. No search
    blocks here, so nothing changes."""


def _compact_arguments(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Schema 6 -> 7: the SQLite store indexes tool-call arguments as ``arguments_text``.
    This store builds its candidates from the rows at each search, so nothing changes."""


MIGRATIONS: dict[int, Callable[[psycopg.Connection[tuple[object, ...]], str], None]] = {
    2: _add_patches,
    3: _search_blocks,
    4: _search_segment,
    5: _latin1_blocks,
    6: _compact_arguments,
}


def prepare(db: psycopg.Connection[tuple[object, ...]], where: str) -> None:
    """Create the tables of a new database or migrate an older one, in one transaction
    (``where`` names the database without credentials, for errors)."""
    with db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
        found = db.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
        row = None
        if found is not None and found[0]:
            row = db.execute("SELECT version FROM schema_version").fetchone()
        if row is None:
            for statement in _TABLES:
                db.execute(statement)
            db.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
            return
        version = row[0]
        if not isinstance(version, int):
            raise StoreError(f"store {where}: schema version {version!r} is not a number")
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"store {where} has schema {version}, newer than this emelex"
                f" understands ({SCHEMA_VERSION}): upgrade emelex to open it"
            )
        while version < SCHEMA_VERSION:
            if version not in MIGRATIONS:
                raise StoreError(f"store {where}: no migration from schema {version}")
            MIGRATIONS[version](db, where)
            version += 1
        db.execute("UPDATE schema_version SET version=%s", (SCHEMA_VERSION,))
