"""The PostgreSQL store: the SQLite store's contract on a database several Hosts share.

psycopg 3's blocking API on a small pool of dedicated worker threads, one connection
each (``benchmarks/store.py`` measured it against the async API through trio-asyncio;
the numbers are in docs/service/scale-out.md); history pages and ``events_after`` are
read from the Trio thread itself when its one connection is free (``_reader.py``). A
call its caller gives up on (cancelled) shuts its connection's socket down, so a
statement stuck on a silent network holds neither the caller nor the worker.

Every write is one transaction that locks the session's row first, so a session's
sequences are dense and ordered whichever Host appends; each commit notifies
``emelex_events`` with ``session:sequence`` (the rows themselves are always read from
the tables). Receipts are exactly-once through the
primary key of ``operations`` (``INSERT ... ON CONFLICT``), never check-then-insert.

Writes made for a session's lease holder carry its :class:`Lease`: the transaction
compares the lease row's token (under a share lock) and fails with :class:`LeaseLost`
once another Host has taken the session, so a paused or partitioned Host cannot commit
after its lease moved. The connection string's password is never logged, stored or put
in an error: errors name the database by :func:`redact_dsn`.

Over 700 lines, and ``_append`` over 80: the one PostgreSQL implementation of the
``Store`` protocol, whose append still carries the plan it shares with the SQLite store
(events to rows, tool names, search blocks); that plan moves to a module of its own next.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, TypeVar

import psycopg
import psycopg.conninfo
import trio

from emelex._builders import flat_builder
from emelex.model import Message, to_json
from emelex.runtime import DedicatedWorker, WorkerJob, WorkerJobAborted, open_dedicated_worker
from emelex.store._decode import (
    MAX_PAGE_ROWS,
    SessionSummary,
    StoredSession,
    calls_field,
    count_field,
    decode_session,
    json_object_field,
    session_title,
    text_field,
)
from emelex.store._errors import (
    LeaseLost,
    OperationConflict,
    SessionExists,
    SessionNotFound,
    StoreError,
)
from emelex.store._lease import Lease
from emelex.store._log import (
    TURN_SETTLED,
    AppendResult,
    NewEvent,
    OperationRecord,
    Outcome,
    Position,
    RowFields,
    RowPage,
    StoredEvent,
    StoredRow,
    ToolNames,
    turn_events,
)
from emelex.store._schema import calls_json
from emelex.store._search import (
    BODY,
    THINKING,
    TOOL_ARGUMENTS,
    CandidatePage,
    CandidateRow,
)
from emelex.store.postgres._reader import TrioReader
from emelex.store.postgres._schema import CHANNEL, prepare

#: Connections (each on its own worker thread) a store opens by default.
DEFAULT_POOL_SIZE: Final = 4
MAX_POOL_SIZE: Final = 32
#: A statement running longer fails (a blocked database never holds a Host forever).
DEFAULT_STATEMENT_SECONDS: Final = 30.0
#: How long opening a connection may take (libpq ``connect_timeout``, unless the
#: connection string sets one): a reconnect through a silent network fails, not hangs.
DEFAULT_CONNECT_SECONDS: Final = 10
#: How long the listener waits for a notification before it checks for cancellation.
_LISTEN_POLL_SECONDS: Final = 0.2

_Db = psycopg.Connection[tuple[Any, ...]]
T = TypeVar("T")
R = TypeVar("R")


def redact_dsn(dsn: str) -> str:
    """The connection string without its password (for errors and logs)."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql://(unparsable connection string)"
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    name = str(parts.get("dbname") or "")
    return f"postgresql://{user}{host}{port}/{name}"


_SELECT_ROWS: Final = (
    "SELECT source_sequence, item_index, turn_id, role, internal, tool_name, tool_call_id,"
    " body, thinking, tool_calls, message FROM rows"
)


class _Connection:
    """One worker's connection, opened again after it broke (the next job reconnects).

    A job that its caller gave up on (cancelled: a timeout, a lease that lapsed) may be
    blocked on a socket nobody answers (a partitioned network): :meth:`interrupt` shuts
    that socket down from the Trio thread, so the job fails at once and the worker is
    free again; the next job reconnects (within ``connect_timeout``)."""

    def __init__(self, dsn: str, where: str, statement_seconds: float) -> None:
        self._dsn = dsn
        self._where = where
        self._statement_seconds = statement_seconds
        self._db: _Db | None = None
        self._lock = threading.Lock()
        self._active: tuple[object, int] | None = None  # (job, socket) while a job runs

    def get(self) -> _Db:
        if self._db is None or self._db.closed or self._db.broken:
            if self._db is not None:
                self._db.close()
            self._db = connect(self._dsn, self._statement_seconds)
        return self._db

    def begin(self, job: object) -> _Db:
        """On the worker thread: the connection for ``job``, which may be interrupted."""
        db = self.get()
        with self._lock:
            self._active = (job, db.pgconn.socket)
        return db

    def end(self) -> None:
        with self._lock:
            self._active = None

    def interrupt(self, job: object) -> None:
        """From any thread: break the connection if ``job`` still runs on it."""
        with self._lock:
            if self._active is None or self._active[0] is not job:
                return
            # A duplicate of the descriptor: shutting it down ends the shared socket
            # (libpq's own descriptor stays valid and is closed by psycopg later).
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(self._active[1])) as s:
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def connect(dsn: str, statement_seconds: float) -> _Db:
    """A store connection (blocking): autocommit, the server settings of
    :func:`connection_options`, and ``connect_timeout`` unless ``dsn`` sets one."""
    extra: dict[str, Any] = {}
    with contextlib.suppress(psycopg.Error):
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn):
            extra["connect_timeout"] = DEFAULT_CONNECT_SECONDS
    return psycopg.connect(
        dsn,
        autocommit=True,
        options=connection_options(statement_seconds),
        application_name="emelex",
        **extra,
    )


def connection_options(statement_seconds: float) -> str:
    """The server settings of every store connection: a statement running longer than
    ``statement_seconds`` fails, and a transaction left idle for half that (its client
    cut off or paused mid-transaction) is ended by the server, so its row locks do not
    hold other Hosts up forever. Half: a statement waiting on those locks must outlast
    the dead transaction, or both give up at the same moment."""
    milliseconds = int(statement_seconds * 1000)
    return (
        f"-c statement_timeout={milliseconds}"
        f" -c idle_in_transaction_session_timeout={milliseconds // 2}"
    )


def page_query(include_internal: bool) -> str:
    """The one statement of a history page: the session's fence, then (joined laterally,
    NULLs when there are none) the rows of the keyset page under it. Parameters:
    ``(through or NULL, after_sequence, after_index, limit, session_id)``; no row at all
    means no such session. ``benchmarks/store.py`` runs this same SQL as its baseline."""
    return (
        "SELECT s.last_sequence, r.* FROM sessions s LEFT JOIN LATERAL ("
        + _SELECT_ROWS
        + " WHERE rows.session_id=s.id"
        " AND source_sequence<=COALESCE(%s::bigint, s.last_sequence)"
        " AND (source_sequence, item_index) > (%s, %s)"
        + ("" if include_internal else " AND NOT internal")
        + " ORDER BY source_sequence, item_index LIMIT %s) r ON true WHERE s.id=%s"
    )


#: The page statements for the reader: (prepared name, SQL with $n placeholders) by
#: ``include_internal``.
_NATIVE_PAGE: Final = {
    internal: (
        f"emelex_page_{int(internal)}".encode(),
        (page_query(internal) % ("$1", "$2", "$3", "$4", "$5")).encode(),
    )
    for internal in (False, True)
}
_EVENTS_AFTER: Final = (
    "SELECT sequence, kind, turn_id, at, payload FROM events"
    " WHERE session_id=%s AND sequence>%s ORDER BY sequence LIMIT %s"
)
_NATIVE_EVENTS_AFTER: Final = (
    b"emelex_events_after",
    (_EVENTS_AFTER % ("$1", "$2", "$3")).encode(),
)


#: A page's StoredRow with its Position and RowFields, in one call.
_page_row: Final = flat_builder(StoredRow, position=Position, fields=RowFields)

#: Rows one search page hands to the matcher (every row is a candidate here).
SEARCH_PAGE_ROWS: Final = 500


class PostgresStore:
    """Durable sessions in a PostgreSQL database, shared by every Host that opens it.
    Create with :func:`open_postgres_store`. The same contract as :class:`SqliteStore`
    (see :class:`Store`), plus leases and notifications for several Hosts."""

    def __init__(
        self,
        pool: Sequence[DedicatedWorker[_Connection]],
        where: str,
        dsn: str,
        reader: TrioReader | None = None,
    ) -> None:
        self._pool = tuple(pool)
        #: Pages are read from the Trio thread when this connection is free.
        self._reader = reader
        self._dsn = dsn  # in memory only: never logged, never stored
        #: The database, named without credentials.
        self.path = where

    async def _run(self, fn: Callable[[_Db], T], session_id: str | None = None) -> T:
        # The least busy connection: a statement waiting on a row lock holds only its own.
        worker = min(self._pool, key=lambda w: w.outstanding)
        ran_on: list[_Connection] = []

        def job(handle: WorkerJob[_Connection, T]) -> T:
            connection = handle.resource
            ran_on.append(connection)
            try:
                db = connection.begin(handle)
                if handle.aborted:  # cancelled while it started: interrupt() came too early
                    raise WorkerJobAborted("the caller gave up before the statement")
                return fn(db)
            finally:
                connection.end()

        try:
            async with worker.job(job) as handle:
                try:
                    async for _ in handle.batches():
                        pass  # until it left the worker (it emits nothing)
                except trio.Cancelled:
                    # Given up: a statement stuck on a silent network must not keep the
                    # caller (shielded until the job leaves) nor the worker.
                    if ran_on:
                        ran_on[0].interrupt(handle)
                    raise
                return await handle.result()
        except psycopg.Error as exc:
            raise StoreError(f"store {self.path}: {_describe(exc)}") from exc

    async def _fetch(
        self, query: str, native: tuple[bytes, bytes], values: Sequence[object]
    ) -> list[Any]:
        """Every row of a read statement: from the Trio thread when its connection is
        free (see ``_reader.py``), else on a worker thread."""
        reader = self._reader
        if reader is None or reader.busy:
            return await self._run(lambda db: db.execute(query, values).fetchall())
        try:
            return await reader.fetch(*native, values)
        except psycopg.Error as exc:
            raise StoreError(f"store {self.path}: {_describe(exc)}") from exc

    # -- sessions ---------------------------------------------------------------------------
    async def create_session(
        self,
        session_id: str,
        authority_json: str,
        config: dict[str, Any] | None = None,
        *,
        events: Sequence[NewEvent] = (),
        operation: OperationRecord | None = None,
    ) -> AppendResult:
        """Create a session and append its first ``events`` (with ``operation``'s receipt)
        in one transaction. Raises :class:`SessionExists` when the id is taken."""
        encoded = [(event, json.dumps(event.payload)) for event in events]
        config_json = json.dumps(config or {})

        def create(db: _Db) -> AppendResult:
            now = time.time()
            with db.transaction():
                made = db.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, authority, config)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                    (session_id, now, now, authority_json, config_json),
                ).fetchone()
                if made is None:
                    raise SessionExists(f"session {session_id} already exists")
                return self._append(db, session_id, encoded, 0, "", operation, None)

        return await self._run(create, session_id)

    async def find_operation(self, session_id: str, reference: str, digest: str) -> str | None:
        """The receipt of ``reference`` when it named this same request (``digest``),
        None when unused; :class:`OperationConflict` when it named another request."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT digest, receipt FROM operations WHERE session_id=%s AND reference=%s",
                (session_id, reference),
            ).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            return None
        if row[0] != digest:
            raise OperationConflict(session_id, reference)
        return text_field(row[1], self.path, session_id, "operations.receipt")

    async def operation_receipt(self, session_id: str, reference: str) -> str | None:
        """The receipt recorded for ``reference``, or None."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT receipt FROM operations WHERE session_id=%s AND reference=%s",
                (session_id, reference),
            ).fetchone()

        row = await self._run(find, session_id)
        return (
            None if row is None else text_field(row[0], self.path, session_id, "operations.receipt")
        )

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        messages: Sequence[Message],
        *,
        outcome: Outcome = "committed",
        operation: OperationRecord | None = None,
        lease: Lease | None = None,
    ) -> AppendResult:
        """Append one settled turn in a single transaction (see :meth:`append_events`)."""
        return await self.append_events(
            session_id,
            turn_events(turn_id, messages, outcome=outcome),
            operation=operation,
            lease=lease,
        )

    async def append_events(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        operation: OperationRecord | None = None,
        lease: Lease | None = None,
    ) -> AppendResult:
        """Append ``events`` (and the rows they publish) in one transaction; a reused
        ``operation`` reference returns its original receipt (same digest) or raises
        :class:`OperationConflict`. With ``lease``, the transaction commits only while
        that lease's token is the session's current one (else :class:`LeaseLost`)."""
        encoded = [(event, json.dumps(event.payload)) for event in events]
        settled = sum(1 for event in events if event.kind == TURN_SETTLED)
        title = session_title([row for event in events for row in event.rows])

        def append(db: _Db) -> AppendResult:
            with db.transaction():
                return self._append(db, session_id, encoded, settled, title, operation, lease)

        return await self._run(append, session_id)

    def _append(
        self,
        db: _Db,
        session_id: str,
        encoded: list[tuple[NewEvent, str]],
        settled: int,
        title: str,
        operation: OperationRecord | None,
        lease: Lease | None,
    ) -> AppendResult:
        # The session's row lock orders every append of this session, on every Host.
        row = db.execute(
            "SELECT last_sequence FROM sessions WHERE id=%s FOR NO KEY UPDATE", (session_id,)
        ).fetchone()
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        last = count_field(row[0], self.path, session_id, "sessions.last_sequence")
        if lease is not None:
            # A share lock: a Host taking the session over waits for this commit.
            held = db.execute(
                "SELECT 1 FROM leases WHERE session_id=%s AND holder=%s AND token=%s FOR SHARE",
                (session_id, lease.holder, lease.token),
            ).fetchone()
            if held is None:
                raise LeaseLost(session_id, lease.token)
        receipt: str | None = None
        if operation is not None:
            inserted = db.execute(
                "INSERT INTO operations (session_id, reference, digest, sequence, receipt)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, reference) DO NOTHING"
                " RETURNING 1",
                (session_id, operation.reference, operation.digest, last, operation.receipt),
            ).fetchone()
            if inserted is None:
                used = db.execute(
                    "SELECT digest, receipt FROM operations WHERE session_id=%s AND reference=%s",
                    (session_id, operation.reference),
                ).fetchone()
                assert used is not None  # the conflicting row is committed and never deleted
                if used[0] != operation.digest:
                    raise OperationConflict(session_id, operation.reference)
                original = text_field(used[1], self.path, session_id, "operations.receipt")
                return AppendResult(sequences=(), receipt=original, replayed=True)
            receipt = operation.receipt
        now = time.time()
        names = _tool_names(db, session_id, encoded)
        sequences = []
        event_values = []
        row_values = []
        call_values = []
        for offset, (event, payload) in enumerate(encoded, start=1):
            sequence = last + offset
            sequences.append(sequence)
            event_values.append((session_id, sequence, event.kind, event.turn_id, now, payload))
            for index, message in enumerate(event.rows):
                fields = names.row_fields(message)
                row_values.append(
                    (
                        session_id,
                        sequence,
                        index,
                        event.turn_id or "",
                        fields.role,
                        fields.internal,
                        fields.tool_name,
                        fields.tool_call_id,
                        fields.body,
                        fields.thinking,
                        calls_json(message),
                        to_json(message),
                    )
                )
                call_values += [(session_id, c.id, c.name) for c in message.tool_calls]
        with db.cursor() as cursor:
            if event_values:
                cursor.executemany(
                    "INSERT INTO events (session_id, sequence, kind, turn_id, at, payload)"
                    " VALUES (%s, %s, %s, %s, %s, %s)",
                    event_values,
                )
            if row_values:
                cursor.executemany(
                    "INSERT INTO rows (session_id, source_sequence, item_index, turn_id, role,"
                    " internal, tool_name, tool_call_id, body, thinking, tool_calls, message)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    row_values,
                )
            if call_values:
                cursor.executemany(
                    "INSERT INTO calls (session_id, call_id, tool_name) VALUES (%s, %s, %s)"
                    " ON CONFLICT DO NOTHING",
                    call_values,
                )
        newest = last + len(encoded)
        db.execute(
            "UPDATE sessions SET updated_at=%s, turns=turns+%s, last_sequence=%s,"
            " title=CASE WHEN title='' THEN %s ELSE title END WHERE id=%s",
            (now, settled, newest, title, session_id),
        )
        if encoded:
            # Delivered at commit, to every Host listening; only a wake-up, never data.
            db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{session_id}:{newest}"))
        return AppendResult(sequences=tuple(sequences), receipt=receipt, replayed=False)

    # -- leases -----------------------------------------------------------------------------
    async def append_patch(
        self,
        session_id: str,
        patch_id: str,
        info_json: str,
        data: bytes,
        events: Sequence[NewEvent],
        *,
        operation: OperationRecord,
    ) -> AppendResult:
        """Store an immutable patch with its announcing events and ``operation``'s
        receipt in one transaction; a replayed operation stores nothing (as SQLite's)."""
        encoded = [(event, json.dumps(event.payload)) for event in events]

        def append(db: _Db) -> AppendResult:
            with db.transaction():
                result = self._append(db, session_id, encoded, 0, "", operation, None)
                if not result.replayed:
                    db.execute(
                        "INSERT INTO patches (session_id, patch_id, info, data)"
                        " VALUES (%s, %s, %s, %s)",
                        (session_id, patch_id, info_json, data),
                    )
                return result

        return await self._run(append, session_id)

    async def read_patch(
        self, session_id: str, patch_id: str, offset: int, limit: int
    ) -> tuple[str, int, bytes] | None:
        """``(info_json, total_bytes, data[offset:offset + limit])`` of a stored patch,
        None when the session has no such patch. Only the slice leaves the server."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT info, octet_length(data), substring(data FROM %s FOR %s) FROM patches"
                " WHERE session_id=%s AND patch_id=%s",
                (offset + 1, limit, session_id, patch_id),
            ).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            return None
        return str(row[0]), int(row[1]), bytes(row[2])

    async def acquire_lease(self, session_id: str, holder: str, seconds: float) -> Lease | None:
        """Take the session's lease for ``holder`` when nobody holds it or its holder let
        it lapse (the token then grows by one), or extend ``holder``'s own live lease;
        None while another Host holds it."""

        def acquire(db: _Db) -> Any:
            return db.execute(
                "INSERT INTO leases AS l (session_id, holder, token, expires_at)"
                " VALUES (%s, %s, 1, now() + make_interval(secs => %s))"
                " ON CONFLICT (session_id) DO UPDATE SET holder=EXCLUDED.holder,"
                " expires_at=EXCLUDED.expires_at,"
                " token=CASE WHEN l.holder=EXCLUDED.holder AND l.expires_at>=now()"
                " THEN l.token ELSE l.token + 1 END"
                " WHERE l.expires_at < now() OR l.holder=EXCLUDED.holder"
                " RETURNING token",
                (session_id, holder, seconds),
            ).fetchone()

        try:
            row = await self._run(acquire, session_id)
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
                raise SessionNotFound(f"no stored session {session_id}") from exc
            raise
        return None if row is None else Lease(session_id, holder, int(row[0]))

    async def renew_lease(self, lease: Lease, seconds: float) -> bool:
        """Extend ``lease`` by ``seconds`` from now; False once another Host took it (its
        token moved). A lapsed lease nobody took is renewed: its token fenced no one."""

        def renew(db: _Db) -> Any:
            return db.execute(
                "UPDATE leases SET expires_at = now() + make_interval(secs => %s)"
                " WHERE session_id=%s AND holder=%s AND token=%s RETURNING 1",
                (seconds, lease.session_id, lease.holder, lease.token),
            ).fetchone()

        return await self._run(renew, lease.session_id) is not None

    async def release_lease(self, lease: Lease) -> None:
        """Give the session up at once (another Host may take it without waiting)."""

        def release(db: _Db) -> None:
            db.execute(
                "UPDATE leases SET expires_at='-infinity'"
                " WHERE session_id=%s AND holder=%s AND token=%s",
                (lease.session_id, lease.holder, lease.token),
            )

        await self._run(release, lease.session_id)

    async def lease_holder(self, session_id: str) -> tuple[str, int, bool] | None:
        """The session's lease row as (holder, token, live), None when none was taken."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT holder, token, expires_at >= now() FROM leases WHERE session_id=%s",
                (session_id,),
            ).fetchone()

        row = await self._run(find, session_id)
        return None if row is None else (str(row[0]), int(row[1]), bool(row[2]))

    # -- reading ----------------------------------------------------------------------------
    async def last_sequence(self, session_id: str) -> int:
        """The sequence of the session's newest event (0 before the first)."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT last_sequence FROM sessions WHERE id=%s", (session_id,)
            ).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return count_field(row[0], self.path, session_id, "sessions.last_sequence")

    async def sequences(self) -> dict[str, int]:
        """Every session's newest sequence (the catch-up query of watching Hosts)."""

        def find(db: _Db) -> Any:
            return db.execute("SELECT id, last_sequence FROM sessions").fetchall()

        return {str(r[0]): int(r[1]) for r in await self._run(find)}

    async def last_position(self, session_id: str) -> Position | None:
        """The newest row's position (internal rows included), None without rows."""

        def find(db: _Db) -> Any:
            return db.execute(
                "SELECT source_sequence, item_index FROM rows WHERE session_id=%s"
                " ORDER BY source_sequence DESC, item_index DESC LIMIT 1",
                (session_id,),
            ).fetchone()

        row = await self._run(find, session_id)
        return None if row is None else Position(int(row[0]), int(row[1]))

    async def _page(
        self,
        session_id: str,
        through: int | None,
        after: Position | None,
        limit: int,
        include_internal: bool,
    ) -> tuple[int, list[Any]]:
        """The fence and up to ``limit + 1`` raw rows (``_SELECT_PAGE``'s columns after
        the first) in one statement, so one round trip."""
        if limit < 1 or limit > MAX_PAGE_ROWS:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_ROWS}")
        start = after if after is not None else Position(0, -1)
        query = page_query(include_internal)
        values = (through, start.source_sequence, start.item_index, limit + 1, session_id)
        rows = await self._fetch(query, _NATIVE_PAGE[include_internal], values)
        if not rows:
            raise SessionNotFound(f"no stored session {session_id}")
        fence = int(rows[0][0]) if through is None else through
        return fence, [] if rows[0][1] is None else rows

    async def history_page(
        self,
        session_id: str,
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
        include_internal: bool = False,
    ) -> RowPage:
        """Rows after ``after`` (exclusive) published by events up to ``through`` (None:
        the newest event, returned as the page's fence), at most ``limit`` of them."""
        fence, rows = await self._page(session_id, through, after, limit, include_internal)
        path = self.path
        decoded: list[StoredRow] = []
        append = decoded.append
        # The schema fixes every column's type (bigint, text, boolean; NOT NULL where
        # SQLite takes anything): built without re-checking; the calls' JSON is checked,
        # the message when decoded.
        for row in rows[:limit]:
            _, sequence, index, turn_id, role, internal, name, call_id, body, thinking = row[:10]
            calls = row[10]
            if calls is not None:
                calls = calls_field(calls, path, session_id, _calls_field(row))
            append(
                _page_row(
                    sequence,
                    index,
                    turn_id,
                    role,
                    body,
                    thinking,
                    name,
                    call_id,
                    internal,
                    calls or (),
                    row[11],
                )
            )
        more = len(rows) > limit
        return RowPage(
            through=fence, rows=tuple(decoded), next_after=decoded[-1].position if more else None
        )

    async def history_page_as(
        self,
        session_id: str,
        build: Callable[..., R],
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
        include_internal: bool = False,
    ) -> tuple[int, list[R], bool]:
        """As :meth:`history_page`, each row built by the caller from its checked values
        (the same contract as the SQLite store's ``history_page_as``)."""
        fence, rows = await self._page(session_id, through, after, limit, include_internal)
        path = self.path
        built = []
        for row in rows[:limit]:
            _, sequence, index, turn_id, role, internal, name, call_id, body, thinking = row[:10]
            calls = row[10]
            if calls is not None:
                calls = calls_field(calls, path, session_id, _calls_field(row))
            built.append(
                build(
                    sequence,
                    index,
                    turn_id,
                    role,
                    body,
                    thinking,
                    calls or (),
                    call_id,
                    name,
                    internal,
                )
            )
        return fence, built, len(rows) > limit

    async def search_candidates(
        self,
        session_id: str,
        query: str,
        *,
        case_sensitive: bool,
        through: int | None = None,
        after: Position | None = None,
    ) -> CandidatePage:
        """Rows after ``after`` under the fence that may contain ``query``: on PostgreSQL
        every visible row of the page is a candidate (its ``lower()`` is not Unicode
        simple case folding, so a SQL filter could drop a real match); the Host's exact
        matcher decides. At most ``SEARCH_PAGE_ROWS`` rows per page."""
        page = await self.history_page(
            session_id, through=through, after=after, limit=SEARCH_PAGE_ROWS
        )
        rows = []
        for r in page.rows:
            fields = [(BODY, r.fields.body), (THINKING, r.fields.thinking or "")]
            fields += [
                (TOOL_ARGUMENTS, json.dumps(call.arguments, ensure_ascii=False))
                for call in r.tool_calls
            ]
            rows.append(CandidateRow(position=r.position, fields=tuple(fields)))
        return CandidatePage(through=page.through, rows=tuple(rows), next_after=page.next_after)

    async def search_candidates_as(
        self,
        session_id: str,
        query: str,
        decide: Callable[[CandidatePage], R],
        *,
        case_sensitive: bool,
        through: int | None = None,
        after: Position | None = None,
        spans: bool = False,
    ) -> R:
        """``decide(page)`` for the page :meth:`search_candidates` returns, on a worker
        thread (the same contract as the SQLite store's ``search_candidates_as``).
        ``spans`` is a hint this store does not take: every row comes as a
        ``CandidateRow``, which leaves the matching to the Host."""
        page = await self.search_candidates(
            session_id, query, case_sensitive=case_sensitive, through=through, after=after
        )
        return await trio.to_thread.run_sync(decide, page)

    async def read_row(
        self, session_id: str, position: Position, *, through: int | None = None
    ) -> StoredRow | None:
        """The row at ``position`` (internal rows too) if an event up to ``through``
        published it, else None."""

        def find(db: _Db) -> Any:
            return db.execute(
                _SELECT_ROWS + " WHERE session_id=%s AND source_sequence=%s AND item_index=%s"
                " AND source_sequence <= COALESCE(%s, source_sequence)",
                (session_id, position.source_sequence, position.item_index, through),
            ).fetchone()

        row = await self._run(find, session_id)
        return None if row is None else self._row(session_id, row)

    def _row(self, session_id: str, r: Any) -> StoredRow:
        # The schema fixes every column's type (text, bigint, boolean; NOT NULL where
        # SQLite would take anything), so only the JSON of the calls needs a check here;
        # the message is checked when decoded.
        field = f"rows[{r[0]},{r[1]}].tool_calls"
        calls = () if r[9] is None else calls_field(r[9], self.path, session_id, field)
        return StoredRow(
            Position(r[0], r[1]), r[2], RowFields(r[3], r[7], r[8], r[5], r[6], r[4]), calls, r[10]
        )

    async def events_after(
        self, session_id: str, after: int, *, limit: int = 100
    ) -> tuple[StoredEvent, ...]:
        """Events with a sequence above ``after``, oldest first, at most ``limit``."""
        if limit < 1 or limit > MAX_PAGE_ROWS:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_ROWS}")

        values = (session_id, after, limit)
        path = self.path
        events = []
        for r in await self._fetch(_EVENTS_AFTER, _NATIVE_EVENTS_AFTER, values):
            field = f"events[sequence={r[0]}]"
            events.append(
                StoredEvent(
                    sequence=int(r[0]),
                    kind=text_field(r[1], path, session_id, field + ".kind"),
                    turn_id=r[2],
                    at=float(r[3]),
                    payload=json_object_field(r[4], path, session_id, field + ".payload"),
                )
            )
        return tuple(events)

    async def load_config(self, session_id: str) -> dict[str, Any]:
        """The configuration object the session was created with."""

        def find(db: _Db) -> Any:
            return db.execute("SELECT config FROM sessions WHERE id=%s", (session_id,)).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return json_object_field(row[0], self.path, session_id, "config")

    async def load_session(self, session_id: str) -> StoredSession:
        def load(db: _Db) -> Any:
            with db.transaction():
                # One snapshot for the session's row and its messages.
                db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                row = db.execute(
                    "SELECT id, created_at, updated_at, authority, config, turns FROM sessions"
                    " WHERE id=%s",
                    (session_id,),
                ).fetchone()
                if row is None:
                    raise SessionNotFound(f"no stored session {session_id}")
                bodies = db.execute(
                    "SELECT source_sequence, item_index, message FROM rows WHERE session_id=%s"
                    " ORDER BY source_sequence, item_index",
                    (session_id,),
                ).fetchall()
            return row, bodies

        row, bodies = await self._run(load, session_id)
        return decode_session(self.path, session_id, row, bodies)

    async def list_sessions(self) -> list[SessionSummary]:
        def listing(db: _Db) -> Any:
            return db.execute(
                "SELECT s.id, s.created_at, s.updated_at, s.turns, s.title,"
                " (SELECT COUNT(*) FROM rows r WHERE r.session_id=s.id)"
                " FROM sessions s ORDER BY s.updated_at DESC, s.id"
            ).fetchall()

        return [
            SessionSummary(
                id=str(r[0]),
                created_at=float(r[1]),
                updated_at=float(r[2]),
                turns=int(r[3]),
                title=str(r[4]),
                messages=int(r[5]),
            )
            for r in await self._run(listing)
        ]

    async def delete_session(self, session_id: str) -> None:
        def delete(db: _Db) -> int:
            return db.execute("DELETE FROM sessions WHERE id=%s", (session_id,)).rowcount

        if await self._run(delete, session_id) == 0:
            raise SessionNotFound(f"no stored session {session_id}")

    async def export_session(self, session_id: str) -> dict[str, Any]:
        """A self-contained JSON-ready export of a session."""
        stored = await self.load_session(session_id)
        return {
            "id": stored.id,
            "created_at": stored.created_at,
            "updated_at": stored.updated_at,
            "turns": stored.turns,
            "config": stored.config,
            "authority": json_object_field(stored.authority, self.path, stored.id, "authority"),
            "messages": [json.loads(to_json(message)) for message in stored.messages],
        }

    # -- notifications ----------------------------------------------------------------------
    @asynccontextmanager
    async def notifications(self) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[str, int]]]:
        """Every commit's ``(session_id, sequence)`` as other connections (other Hosts
        too) make them, from a listening connection on its own thread. Notifications
        may be lost (a reconnect, a full channel): callers also catch up periodically."""
        send, receive = trio.open_memory_channel[tuple[str, int]](1024)

        def open_listener() -> _Db:
            db: _Db = psycopg.connect(self._dsn, autocommit=True, application_name="emelex")
            db.execute("LISTEN " + CHANNEL)
            return db

        def listen(job: WorkerJob[_Db, None]) -> None:
            db = job.resource
            while not job.aborted:
                for note in db.notifies(timeout=_LISTEN_POLL_SECONDS):
                    session_id, _, sequence = note.payload.rpartition(":")
                    if session_id and sequence.isdigit():
                        job.emit((session_id, int(sequence)))

        async def forward(job: WorkerJob[_Db, None]) -> None:
            async with send:
                async for batch in job.batches():
                    for item in batch:
                        # A slow reader loses wake-ups only: the catch-up query covers it.
                        with contextlib.suppress(trio.WouldBlock):
                            send.send_nowait(item)

        try:
            async with (
                open_dedicated_worker(
                    "postgres-listener", setup=open_listener, teardown=_close_db
                ) as worker,
                worker.job(listen) as job,
                trio.open_nursery() as nursery,
            ):
                nursery.start_soon(forward, job)
                try:
                    yield receive
                finally:
                    nursery.cancel_scope.cancel()
        except psycopg.Error as exc:
            raise StoreError(f"store {self.path}: {_describe(exc)}") from exc


def _calls_field(row: Any) -> str:
    """The field a page row's tool calls are named by in a :class:`StoreCorrupt`."""
    return f"rows[{row[1]},{row[2]}].tool_calls"


def _close_db(db: _Db) -> None:
    db.close()


def _describe(exc: psycopg.Error) -> str:
    # psycopg's messages name host, port and user, never the password.
    return " ".join(str(exc).split()) or type(exc).__name__


def _tool_names(db: _Db, session_id: str, encoded: list[tuple[NewEvent, str]]) -> ToolNames:
    """Tool names of calls this append answers but an earlier event proposed."""
    names = ToolNames()
    proposed = {call.id for event, _ in encoded for m in event.rows for call in m.tool_calls}
    answered = sorted(
        {
            m.tool_call_id
            for event, _ in encoded
            for m in event.rows
            if m.tool_call_id is not None and m.tool_call_id not in proposed
        }
    )
    if answered:
        found = db.execute(
            "SELECT call_id, tool_name FROM calls WHERE session_id=%s AND call_id = ANY(%s)",
            (session_id, answered),
        ).fetchall()
        for call_id, tool_name in found:
            names.remember(str(call_id), str(tool_name))
    return names


@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    pool_size: int = DEFAULT_POOL_SIZE,
    statement_seconds: float = DEFAULT_STATEMENT_SECONDS,
) -> AsyncIterator[PostgresStore]:
    """Connect to the database ``dsn`` names (a ``postgresql://`` URL or key=value
    string; missing parts come from the PG* environment variables as libpq reads them),
    create or migrate the tables, and open ``pool_size`` connections, each on its own
    worker thread. Raises :class:`StoreError` when the database cannot be reached or has
    a newer schema; the connections are closed and the threads joined on exit."""
    if not 1 <= pool_size <= MAX_POOL_SIZE:
        raise ValueError(f"pool_size must be between 1 and {MAX_POOL_SIZE}")
    if statement_seconds <= 0:
        raise ValueError("statement_seconds must be positive")
    where = redact_dsn(dsn)

    def open_connection(first: bool) -> _Connection:
        connection = _Connection(dsn, where, statement_seconds)
        try:
            db = connection.get()
            if first:
                prepare(db, where)
        except psycopg.Error as exc:
            connection.close()
            raise StoreError(f"cannot open store {where}: {_describe(exc)}") from exc
        except BaseException:
            connection.close()
            raise
        return connection

    async with AsyncExitStack() as stack:
        pool = [
            await stack.enter_async_context(
                open_dedicated_worker(
                    f"postgres-{n}",
                    setup=functools.partial(open_connection, n == 0),
                    teardown=_Connection.close,
                )
            )
            for n in range(pool_size)
        ]
        reader = TrioReader(functools.partial(connect, dsn, statement_seconds))
        stack.callback(reader.close)
        yield PostgresStore(pool, where, dsn, reader)
