"""The embedded SQLite store: sessions, their authority snapshots, committed turns.

One dedicated worker thread owns the connection (SQLite objects must stay on one
thread); every write of a turn is one transaction, so a stored session always holds
whole turns. Messages are stored in emelex's versioned JSON form. Every value read back
is checked (SQLite columns take any type, and people edit stores by hand): a bad one is a
:class:`StoreCorrupt` naming the session and field. The file is created 0600 (its -wal
and -shm follow), and a looser file is reported on open.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs

from emelex._errors import SerializationError
from emelex._text import clip
from emelex.model import Message, from_json, to_json
from emelex.runtime import DedicatedWorker, WorkerJob, open_dedicated_worker
from emelex.store._errors import SessionExists, SessionNotFound, StoreCorrupt, StoreError
from emelex.store._permissions import create_private_file, warn_if_looser

SCHEMA_VERSION = 1
TITLE_CHARACTERS = 200

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    authority TEXT NOT NULL,
    config TEXT NOT NULL,
    turns INTEGER NOT NULL DEFAULT 0,
    title TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS messages (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    turn_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
"""


@attrs.frozen
class SessionSummary:
    id: str
    created_at: float
    updated_at: float
    turns: int
    messages: int
    title: str


@attrs.frozen
class StoredSession:
    """A stored session: its authority snapshot (JSON), its configuration (JSON object
    chosen by the application) and every committed message in order."""

    id: str
    created_at: float
    updated_at: float
    authority: str
    config: dict[str, Any]
    turns: int
    messages: tuple[Message, ...]


#: SQLite's primary result codes for a damaged file or one that is not a database.
_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


def _map_sqlite(exc: sqlite3.Error, path: str, session_id: str | None = None) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _CORRUPT_CODES:
        return StoreCorrupt(str(exc), path=path, session_id=session_id)
    return StoreError(f"store {path}: {exc}")


def _connect(path: str) -> sqlite3.Connection:
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
        connection = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    try:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.execute("PRAGMA foreign_keys=ON")
        connection.executescript(_SCHEMA)
        row = connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        if row is None:
            connection.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif not isinstance(row[0], str) or not row[0].isdigit():
            raise StoreCorrupt(
                f"schema version {clip(repr(row[0]), 60)} is not a number",
                path=path,
                field="meta.schema",
            )
        elif int(row[0]) != SCHEMA_VERSION:
            raise StoreError(
                f"store {path}: unsupported store schema {row[0]} (expected {SCHEMA_VERSION})"
            )
    except BaseException as exc:
        connection.close()
        if isinstance(exc, sqlite3.Error):
            raise _map_sqlite(exc, path) from exc
        raise
    return connection


def _text(value: object, path: str, session_id: str, field: str) -> str:
    if not isinstance(value, str):
        raise StoreCorrupt(
            f"expected text, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return value


def _number(value: object, path: str, session_id: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreCorrupt(
            f"expected a number, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return float(value)


def _count(value: object, path: str, session_id: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreCorrupt(
            f"expected a count, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return value


def _json_object(value: object, path: str, session_id: str, field: str) -> dict[str, Any]:
    text = _text(value, path, session_id, field)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StoreCorrupt(
            f"not valid JSON ({exc})", path=path, session_id=session_id, field=field
        ) from exc
    if not isinstance(data, dict):
        raise StoreCorrupt(
            f"expected a JSON object, found {type(data).__name__}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return data


def _title(messages: Sequence[Message]) -> str:
    for message in messages:
        if message.role == "user":
            # Bounded here; the command line shortens it for display at a word boundary.
            return " ".join(message.text.split())[:TITLE_CHARACTERS]
    return ""


class SqliteStore:
    """Durable sessions in one SQLite file. Create with :func:`open_sqlite_store`.

    Every method is async, checkpoints, and runs on the store's worker thread; a
    cancelled call waits until its statement has finished (a transaction is never
    left half-applied).
    """

    def __init__(self, worker: DedicatedWorker[sqlite3.Connection], path: str) -> None:
        self._worker = worker
        self.path = path

    async def _run(self, fn: Any, session_id: str | None = None) -> Any:
        try:
            return await self._worker.run(fn)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path, session_id) from exc

    async def create_session(
        self, session_id: str, authority_json: str, config: dict[str, Any] | None = None
    ) -> None:
        def create(job: WorkerJob[sqlite3.Connection, None]) -> None:
            db = job.resource
            now = time.time()
            try:
                db.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, authority, config)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (session_id, now, now, authority_json, json.dumps(config or {})),
                )
            except sqlite3.IntegrityError as exc:
                raise SessionExists(f"session {session_id} already exists") from exc

        await self._run(create, session_id)

    async def append_turn(self, session_id: str, turn_id: str, messages: Sequence[Message]) -> None:
        """Append one turn's committed messages in a single transaction."""
        bodies = [to_json(message) for message in messages]
        title = _title(messages)

        def append(job: WorkerJob[sqlite3.Connection, None]) -> None:
            db = job.resource
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute(
                    "SELECT COALESCE(MAX(seq), -1) FROM messages WHERE session_id=?",
                    (session_id,),
                ).fetchone()
                exists = db.execute("SELECT 1 FROM sessions WHERE id=?", (session_id,)).fetchone()
                if exists is None:
                    raise SessionNotFound(f"no stored session {session_id}")
                last = row[0]
                if isinstance(last, bool) or not isinstance(last, int):
                    raise StoreCorrupt(
                        f"message number {clip(repr(last), 60)} is not an integer",
                        path=self.path,
                        session_id=session_id,
                        field="messages.seq",
                    )
                first = last + 1
                db.executemany(
                    "INSERT INTO messages (session_id, seq, turn_id, body) VALUES (?, ?, ?, ?)",
                    [(session_id, first + i, turn_id, body) for i, body in enumerate(bodies)],
                )
                db.execute(
                    "UPDATE sessions SET updated_at=?, turns=turns+1,"
                    " title=CASE WHEN title='' THEN ? ELSE title END WHERE id=?",
                    (time.time(), title, session_id),
                )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

        await self._run(append, session_id)

    async def load_session(self, session_id: str) -> StoredSession:
        def load(job: WorkerJob[sqlite3.Connection, tuple[Any, list[str]]]) -> Any:
            db = job.resource
            row = db.execute(
                "SELECT id, created_at, updated_at, authority, config, turns FROM sessions"
                " WHERE id=?",
                (session_id,),
            ).fetchone()
            if row is None:
                raise SessionNotFound(f"no stored session {session_id}")
            bodies = db.execute(
                "SELECT seq, body FROM messages WHERE session_id=? ORDER BY seq", (session_id,)
            ).fetchall()
            return row, bodies

        row, bodies = await self._run(load, session_id)
        path = self.path
        authority = _text(row[3], path, session_id, "authority")
        _json_object(authority, path, session_id, "authority")
        messages = []
        for seq, body in bodies:
            field = f"messages[seq={seq}].body"
            try:
                messages.append(from_json(_text(body, path, session_id, field), Message))
            except SerializationError as exc:
                raise StoreCorrupt(str(exc), path=path, session_id=session_id, field=field) from exc
        return StoredSession(
            id=session_id,
            created_at=_number(row[1], path, session_id, "created_at"),
            updated_at=_number(row[2], path, session_id, "updated_at"),
            authority=authority,
            config=_json_object(row[4], path, session_id, "config"),
            turns=_count(row[5], path, session_id, "turns"),
            messages=tuple(messages),
        )

    async def list_sessions(self) -> list[SessionSummary]:
        def listing(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT s.id, s.created_at, s.updated_at, s.turns, s.title,"
                " (SELECT COUNT(*) FROM messages m WHERE m.session_id=s.id)"
                " FROM sessions s ORDER BY s.updated_at DESC, s.id"
            ).fetchall()

        rows = await self._run(listing)
        path = self.path
        summaries = []
        for r in rows:
            session_id = r[0] if isinstance(r[0], str) else repr(r[0])
            summaries.append(
                SessionSummary(
                    id=_text(r[0], path, session_id, "id"),
                    created_at=_number(r[1], path, session_id, "created_at"),
                    updated_at=_number(r[2], path, session_id, "updated_at"),
                    turns=_count(r[3], path, session_id, "turns"),
                    title=_text(r[4], path, session_id, "title"),
                    messages=r[5],
                )
            )
        return summaries

    async def delete_session(self, session_id: str) -> None:
        def delete(job: WorkerJob[sqlite3.Connection, None]) -> None:
            cursor = job.resource.execute("DELETE FROM sessions WHERE id=?", (session_id,))
            if cursor.rowcount == 0:
                raise SessionNotFound(f"no stored session {session_id}")

        await self._run(delete, session_id)

    async def export_session(self, session_id: str) -> dict[str, Any]:
        """A self-contained JSON-ready export of a session."""
        stored = await self.load_session(session_id)
        return {
            "id": stored.id,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "turns": stored.turns,
            "config": stored.config,
            "authority": _json_object(stored.authority, self.path, stored.id, "authority"),
            "messages": [json.loads(to_json(message)) for message in stored.messages],
        }


@asynccontextmanager
async def open_sqlite_store(path: str) -> AsyncIterator[SqliteStore]:
    """Open (creating if needed, mode 0600) the store at ``path`` on a dedicated worker
    thread. A store file (or its -wal, -shm, -journal) that other users may access is
    logged as a warning on the ``emelex.store`` logger.

    Raises :class:`StoreError` when the file cannot be opened or has another schema, and
    :class:`StoreCorrupt` when it is not a sound SQLite database. The connection is
    closed and the thread joined when the block exits.
    """
    async with open_dedicated_worker(
        "sqlite-store", setup=lambda: _connect(path), teardown=lambda db: db.close()
    ) as worker:
        yield SqliteStore(worker, path)
