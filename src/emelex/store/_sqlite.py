"""The embedded SQLite store: sessions, their authority snapshots, committed turns.

One dedicated worker thread owns the connection (SQLite objects must stay on one
thread); every write of a turn is one transaction, so a stored session always holds
whole turns. Messages are stored in emelex's versioned JSON form.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs

from emelex._errors import EmelexError
from emelex.model import Message, from_json, to_json
from emelex.runtime import DedicatedWorker, WorkerJob, open_dedicated_worker

SCHEMA_VERSION = 1

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


class StoreError(EmelexError):
    """The store failed or was asked for something it does not hold."""


class SessionNotFound(StoreError):
    """No stored session has that id."""


class SessionExists(StoreError):
    """A session with that id is already stored."""


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


def _connect(path: str) -> sqlite3.Connection:
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=True)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute("PRAGMA foreign_keys=ON")
    connection.executescript(_SCHEMA)
    row = connection.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    if row is None:
        connection.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
    elif int(row[0]) != SCHEMA_VERSION:
        connection.close()
        raise StoreError(f"{path}: unsupported store schema {row[0]} (expected {SCHEMA_VERSION})")
    return connection


def _title(messages: Sequence[Message]) -> str:
    for message in messages:
        if message.role == "user":
            text = message.text.strip().replace("\n", " ")
            return text[:60]
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

    async def _run(self, fn: Any) -> Any:
        try:
            return await self._worker.run(fn)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {type(exc).__name__}: {exc}") from exc

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

        await self._run(create)

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
                first = int(row[0]) + 1
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

        await self._run(append)

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
            bodies = [
                body
                for (body,) in db.execute(
                    "SELECT body FROM messages WHERE session_id=? ORDER BY seq", (session_id,)
                )
            ]
            return row, bodies

        row, bodies = await self._run(load)
        return StoredSession(
            id=row[0],
            created_at=row[1],
            updated_at=row[2],
            authority=row[3],
            config=json.loads(row[4]),
            turns=row[5],
            messages=tuple(from_json(body, Message) for body in bodies),
        )

    async def list_sessions(self) -> list[SessionSummary]:
        def listing(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT s.id, s.created_at, s.updated_at, s.turns, s.title,"
                " (SELECT COUNT(*) FROM messages m WHERE m.session_id=s.id)"
                " FROM sessions s ORDER BY s.updated_at DESC, s.id"
            ).fetchall()

        rows = await self._run(listing)
        return [
            SessionSummary(
                id=r[0], created_at=r[1], updated_at=r[2], turns=r[3], title=r[4], messages=r[5]
            )
            for r in rows
        ]

    async def delete_session(self, session_id: str) -> None:
        def delete(job: WorkerJob[sqlite3.Connection, None]) -> None:
            cursor = job.resource.execute("DELETE FROM sessions WHERE id=?", (session_id,))
            if cursor.rowcount == 0:
                raise SessionNotFound(f"no stored session {session_id}")

        await self._run(delete)

    async def export_session(self, session_id: str) -> dict[str, Any]:
        """A self-contained JSON-ready export of a session."""
        stored = await self.load_session(session_id)
        return {
            "id": stored.id,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "turns": stored.turns,
            "config": stored.config,
            "authority": json.loads(stored.authority),
            "messages": [json.loads(to_json(message)) for message in stored.messages],
        }


@asynccontextmanager
async def open_sqlite_store(path: str) -> AsyncIterator[SqliteStore]:
    """Open (creating if needed) the store at ``path`` on a dedicated worker thread.

    Raises :class:`StoreError` for an incompatible file. The connection is closed and the
    thread joined when the block exits.
    """

    def setup() -> sqlite3.Connection:
        try:
            return _connect(path)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open store {path}: {exc}") from exc

    async with open_dedicated_worker(
        "sqlite-store", setup=setup, teardown=lambda db: db.close()
    ) as worker:
        yield SqliteStore(worker, path)
