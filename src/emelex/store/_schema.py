"""The store's tables, and forward migrations from every earlier schema.

Schema 1 (before the event log) kept one ``messages`` table per session. Schema 2 keeps an
append-only ``events`` log per session; history ``rows`` are derived from events and
addressed by position; ``operations`` keeps the receipt of every caller-named mutation.
Schema 3 adds ``patches``: immutable completed-work patches captured from a session's
workspace (the patch bytes and their description). Schema 4 adds ``search_blocks``, each
session's case-folded searchable text in blocks (see ``_search``). Schema 5 moves the text of
closed blocks to the search segment, a file beside the store (``segment_offset`` and
``segment_length``; see ``_segment``): blocks written before keep their text in SQLite.
Schema 6 lets a closed block keep its text in Latin-1 (``segment_latin1``) when every
character of it fits one byte, so its byte offsets are character offsets.
Opening an older store migrates it in one transaction; a newer one is refused. Opening a
store whose search segment is missing or shorter than its blocks need rebuilds the blocks.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from collections.abc import Callable
from itertools import groupby

from emelex._errors import SerializationError
from emelex._text import clip
from emelex.model import Message, from_json
from emelex.store._append_plan import PlannedRow, planned_row
from emelex.store._errors import StoreCorrupt, StoreError
from emelex.store._log import ToolNames, turn_events
from emelex.store._permissions import create_private_file, warn_if_looser
from emelex.store._search import (
    LATIN1_COLUMN,
    SEARCH_BLOCKS_TABLE,
    SEGMENT_COLUMNS,
    SEGMENT_END_KEY,
    append_to_blocks,
    arguments_of,
    searchable,
)
from emelex.store._segment import Segment, SegmentConnection, segment_path

SCHEMA_VERSION = 7
_log = logging.getLogger("emelex.store")
#: Bytes of the database file a reader connection maps into memory (address space only).
READER_MMAP_BYTES = 1 << 30

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    authority TEXT NOT NULL,
    config TEXT NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL DEFAULT '',
    last_sequence INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS events (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    sequence INTEGER NOT NULL,
    kind TEXT NOT NULL,
    turn_id TEXT,
    at REAL NOT NULL,
    payload TEXT NOT NULL,
    PRIMARY KEY (session_id, sequence)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rows (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    source_sequence INTEGER NOT NULL,
    item_index INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    role TEXT NOT NULL,
    internal INTEGER NOT NULL,
    tool_name TEXT,
    tool_call_id TEXT,
    body TEXT NOT NULL,
    thinking TEXT,
    tool_calls TEXT,
    message TEXT NOT NULL,
    PRIMARY KEY (session_id, source_sequence, item_index)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS calls (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS operations (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    reference TEXT NOT NULL,
    digest TEXT NOT NULL,
    sequence INTEGER NOT NULL,
    receipt TEXT NOT NULL,
    PRIMARY KEY (session_id, reference)
) WITHOUT ROWID;
"""

# Patch bytes can be large: an ordinary rowid table keeps them out of the index b-tree.
_PATCH_TABLE = """
CREATE TABLE IF NOT EXISTS patches (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    patch_id TEXT NOT NULL,
    info TEXT NOT NULL,
    data BLOB NOT NULL,
    UNIQUE (session_id, patch_id)
)
"""

INSERT_EVENT = (
    "INSERT INTO events (session_id, sequence, kind, turn_id, at, payload)"
    " VALUES (?, ?, ?, ?, ?, ?)"
)
INSERT_ROW = (
    "INSERT INTO rows (session_id, source_sequence, item_index, turn_id, role, internal,"
    " tool_name, tool_call_id, body, thinking, tool_calls, message)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _create_tables(db: sqlite3.Connection) -> None:
    # Statement by statement: executescript would commit the open transaction first.
    for statement in _TABLES.split(";"):
        if statement.strip():
            db.execute(statement)
    db.execute(_PATCH_TABLE)
    db.execute(SEARCH_BLOCKS_TABLE)


def _migrate_2_to_3(db: sqlite3.Connection, path: str) -> None:
    """Add the table of captured patches (nothing else changes)."""
    db.execute(_PATCH_TABLE)


def _schema_version(db: sqlite3.Connection, path: str) -> int | None:
    has_meta = db.execute(
        "SELECT 1 FROM sqlite_master WHERE type='table' AND name='meta'"
    ).fetchone()
    if has_meta is None:
        return None
    row = db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        return None
    if not isinstance(row[0], str) or not row[0].isdigit():
        raise StoreCorrupt(
            f"schema version {clip(repr(row[0]), 60)} is not a number",
            path=path,
            field="meta.schema",
        )
    return int(row[0])


def _migrate_1_to_2(db: sqlite3.Connection, path: str) -> None:
    """Replay every stored turn of schema 1 as the events it would have appended."""
    db.execute("ALTER TABLE sessions ADD COLUMN last_sequence INTEGER NOT NULL DEFAULT 0")
    _create_tables(db)  # sessions and meta exist already and are kept
    sessions = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY id").fetchall()]
    for session_id in sessions:
        stored = db.execute(
            "SELECT seq, turn_id, body, (SELECT updated_at FROM sessions WHERE id=?)"
            " FROM messages WHERE session_id=? ORDER BY seq",
            (session_id, session_id),
        ).fetchall()
        sequence = 0
        names = ToolNames()
        for turn_id, group in groupby(stored, key=lambda r: r[1]):
            messages = []
            at = 0.0
            for seq, _turn, body, updated in group:
                field = f"messages[seq={seq}].body"
                if not isinstance(body, str):
                    raise StoreCorrupt(
                        "expected text", path=path, session_id=session_id, field=field
                    )
                try:
                    messages.append(from_json(body, Message))
                except SerializationError as exc:
                    raise StoreCorrupt(
                        str(exc), path=path, session_id=session_id, field=field
                    ) from exc
                at = float(updated) if isinstance(updated, int | float) else 0.0
            for event in turn_events(str(turn_id), messages):
                sequence += 1
                payload = dict(event.payload, migrated=True)
                db.execute(
                    INSERT_EVENT,
                    (session_id, sequence, event.kind, event.turn_id, at, json.dumps(payload)),
                )
                for index, message in enumerate(event.rows):
                    row = planned_row(sequence, index, str(turn_id), message, names)
                    insert_row(db, session_id, row)
        db.execute("UPDATE sessions SET last_sequence=? WHERE id=?", (sequence, session_id))
    db.execute("DROP TABLE messages")


def _migrate_3_to_4(db: sqlite3.Connection, path: str) -> None:
    """Build every session's search blocks from its stored rows."""
    db.execute(SEARCH_BLOCKS_TABLE)
    _build_blocks(db, path)


def _migrate_4_to_5(db: sqlite3.Connection, path: str) -> None:
    """Closed blocks may keep their text in the search segment: add the columns that
    say where (a table created by this version's ``SEARCH_BLOCKS_TABLE`` has them).
    Existing blocks keep their text in SQLite."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(search_blocks)")}
    for column in SEGMENT_COLUMNS:
        if column not in columns:
            db.execute(f"ALTER TABLE search_blocks ADD COLUMN {column} INTEGER")


def _migrate_5_to_6(db: sqlite3.Connection, path: str) -> None:
    """Closed blocks may keep their text in Latin-1: add the column that says so (a table
    created by this version's ``SEARCH_BLOCKS_TABLE`` has it). Existing blocks are
    UTF-8, as NULL says."""
    columns = {r[1] for r in db.execute("PRAGMA table_info(search_blocks)")}
    if LATIN1_COLUMN not in columns:
        db.execute(f"ALTER TABLE search_blocks ADD COLUMN {LATIN1_COLUMN} INTEGER")


def _migrate_6_to_7(db: sqlite3.Connection, path: str) -> None:
    """Tool-call arguments are indexed as ``arguments_text`` (compact JSON) rather than
    ``json.dumps``'s spaced form, so hits count offsets in the text a source read
    returns: rebuild the blocks of every session whose rows propose a call. Their old
    closed text stays in the segment, unreferenced (it is never truncated: another
    process may still map it)."""
    sessions = [
        r[0]
        for r in db.execute(
            "SELECT DISTINCT session_id FROM rows WHERE tool_calls IS NOT NULL AND internal=0"
            " ORDER BY session_id"
        )
    ]
    for session_id in sessions:
        db.execute("DELETE FROM search_blocks WHERE session_id=?", (session_id,))
    _build_blocks(db, path, sessions)


def _check_segment(db: sqlite3.Connection, path: str) -> None:
    """Rebuild every session's search blocks when the search segment does not hold the
    bytes the blocks name (missing, truncated, or a store copied without it)."""
    row = db.execute("SELECT value FROM meta WHERE key=?", (SEGMENT_END_KEY,)).fetchone()
    if row is None:
        return
    if not isinstance(row[0], str) or not row[0].isdigit():
        raise StoreCorrupt(
            f"search segment end {clip(repr(row[0]), 60)} is not a number",
            path=path,
            field="meta." + SEGMENT_END_KEY,
        )
    name = segment_path(path)
    try:
        size = os.stat(name).st_size
    except FileNotFoundError:
        size = -1
    except OSError as exc:
        raise StoreError(f"cannot open search segment {name}: {exc.strerror or exc}") from exc
    if size >= int(row[0]):
        return
    _log.warning(
        "store %s: search segment %s holds %s of %s bytes; rebuilding the search blocks",
        path,
        name,
        max(size, 0),
        row[0],
    )
    db.execute("DELETE FROM search_blocks")
    db.execute("DELETE FROM meta WHERE key=?", (SEGMENT_END_KEY,))
    # The new blocks go after whatever bytes remain (never truncated: another process
    # may still map them).
    _build_blocks(db, path)


def _build_blocks(db: sqlite3.Connection, path: str, sessions: list[str] | None = None) -> None:
    """The search blocks of ``sessions`` (default: every session) from their stored rows
    (none of them has blocks yet)."""
    if sessions is None:
        sessions = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY id").fetchall()]
    for session_id in sessions:
        cursor = db.execute(
            "SELECT source_sequence, item_index, body, thinking, tool_calls FROM rows"
            " WHERE session_id=? AND internal=0 ORDER BY source_sequence, item_index",
            (session_id,),
        )
        while batch := cursor.fetchmany(1000):
            entries = []
            for sequence, index, body, thinking, calls in batch:
                field = f"rows[{sequence},{index}]"
                try:
                    entry = searchable(body, thinking, arguments_of(calls))
                except (ValueError, TypeError, IndexError, AttributeError, RecursionError) as exc:
                    message = f"row does not decode ({exc})"
                    raise StoreCorrupt(
                        message, path=path, session_id=session_id, field=field
                    ) from exc
                entries.append((sequence, index, entry))
            append_to_blocks(db, session_id, entries)


def insert_row(db: sqlite3.Connection, session_id: str, row: PlannedRow) -> None:
    """Insert one planned row, and the names of the calls it proposes."""
    fields = row.fields
    db.execute(
        INSERT_ROW,
        (
            session_id,
            row.sequence,
            row.index,
            row.turn_id,
            fields.role,
            int(fields.internal),
            fields.tool_name,
            fields.tool_call_id,
            fields.body,
            fields.thinking,
            row.calls,
            row.message,
        ),
    )
    if row.call_names:
        # Tool rows carry only the call id; this keeps the name for results stored later.
        db.executemany(
            "INSERT OR IGNORE INTO calls (session_id, call_id, tool_name) VALUES (?, ?, ?)",
            [(session_id, call_id, name) for call_id, name in row.call_names],
        )


def search_entry(row: PlannedRow) -> tuple[list[int], str] | None:
    """A planned row's search-block entry (None for an internal row, which search never
    shows)."""
    if row.fields.internal:
        return None
    return searchable(row.fields.body, row.fields.thinking, arguments_of(row.calls))


#: ``MIGRATIONS[n]`` turns schema ``n`` into schema ``n + 1`` (inside one transaction).
MIGRATIONS: dict[int, Callable[[sqlite3.Connection, str], None]] = {
    1: _migrate_1_to_2,
    2: _migrate_2_to_3,
    3: _migrate_3_to_4,
    4: _migrate_4_to_5,
    5: _migrate_5_to_6,
    6: _migrate_6_to_7,
}


def prepare(db: sqlite3.Connection, path: str) -> None:
    """Create the tables of a new store or migrate an older one, in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(db, path)
        if version is None:
            _create_tables(db)
            db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif version > SCHEMA_VERSION:
            raise StoreError(
                f"store {path} has schema {version}, newer than this emelex"
                f" understands ({SCHEMA_VERSION}): upgrade emelex to open it"
            )
        else:
            while version < SCHEMA_VERSION:
                if version not in MIGRATIONS:
                    raise StoreError(f"store {path}: no migration from schema {version}")
                MIGRATIONS[version](db, path)
                version += 1
            db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
        _check_segment(db, path)
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def connect(path: str, *, readonly: bool = False) -> sqlite3.Connection:
    """Open one connection; the writer also creates or migrates the tables."""
    if not readonly:
        try:
            create_private_file(path)
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc.strerror or exc}") from exc
        try:
            # SQLite only says "unable to open database file": ask the system why first.
            with open(path, "rb+"):
                pass
        except OSError as exc:
            raise StoreError(f"cannot open store {path}: {exc.strerror or exc}") from exc
        warn_if_looser(path)
    try:
        connection = sqlite3.connect(
            path, isolation_level=None, check_same_thread=True, factory=SegmentConnection
        )
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    assert isinstance(connection, SegmentConnection)
    connection.search_segment = Segment(segment_path(path))
    try:
        if readonly:
            connection.execute("PRAGMA query_only=ON")
            # Readers map the file: a search scans ~100 MiB of blocks, and paging them
            # through read() calls (4 KiB each) costs more than the search itself.
            connection.execute(f"PRAGMA mmap_size={READER_MMAP_BYTES}")
        else:
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        if not readonly:
            prepare(connection, path)
    except BaseException:
        connection.close()
        raise
    return connection
