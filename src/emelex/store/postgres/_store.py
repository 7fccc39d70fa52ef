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

Checked decoding (``_decode.py``) and the append plan (``_append_plan.py``) are shared
with the SQLite store; this module keeps only PostgreSQL's statements, locks and leases.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Final, TypeVar

import psycopg
import psycopg.conninfo
import trio

from emelex.contracts import arguments_text
from emelex.model import Message, to_json
from emelex.runtime import DedicatedWorker, WorkerJob, WorkerJobAborted, open_dedicated_worker
from emelex.store._append_plan import EncodedAppend
from emelex.store._decode import (
    MAX_PAGE_ROWS,
    SessionSummary,
    StoredSession,
    calls_field,
    count_field,
    decode_event,
    decode_session,
    json_object_field,
    text_field,
)
from emelex.store._errors import (
    OperationConflict,
    SessionExists,
    SessionNotFound,
    StoreError,
)
from emelex.store._lease import Lease
from emelex.store._log import (
    AppendResult,
    NewEvent,
    OperationRecord,
    Outcome,
    Position,
    RowFields,
    RowPage,
    StoredEvent,
    StoredRow,
    turn_events,
)
from emelex.store._search import (
    BODY,
    THINKING,
    TOOL_ARGUMENTS,
    CandidatePage,
    CandidateRow,
)
from emelex.store.postgres._append import append_planned
from emelex.store.postgres._connection import (
    DEFAULT_POOL_SIZE,
    DEFAULT_STATEMENT_SECONDS,
    MAX_POOL_SIZE,
    Connection,
    Db,
    connect,
    describe,
    redact_dsn,
)
from emelex.store.postgres._notify import listen_for_commits
from emelex.store.postgres._pages import built_rows, stored_rows
from emelex.store.postgres._queries import (
    EVENTS_AFTER,
    NATIVE_EVENTS_AFTER,
    NATIVE_PAGE,
    SELECT_ROWS,
    page_query,
)
from emelex.store.postgres._reader import TrioReader
from emelex.store.postgres._schema import prepare

T = TypeVar("T")
R = TypeVar("R")


#: Rows one search page hands to the matcher (every row is a candidate here).
SEARCH_PAGE_ROWS: Final = 500


class PostgresStore:
    """Durable sessions in a PostgreSQL database, shared by every Host that opens it.
    Create with :func:`open_postgres_store`. The same contract as :class:`SqliteStore`
    (see :class:`Store`), plus leases and notifications for several Hosts."""

    def __init__(
        self,
        pool: Sequence[DedicatedWorker[Connection]],
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

    async def _run(self, fn: Callable[[Db], T], session_id: str | None = None) -> T:
        # The least busy connection: a statement waiting on a row lock holds only its own.
        worker = min(self._pool, key=lambda w: w.outstanding)
        ran_on: list[Connection] = []

        def job(handle: WorkerJob[Connection, T]) -> T:
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
            raise StoreError(f"store {self.path}: {describe(exc)}") from exc

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
            raise StoreError(f"store {self.path}: {describe(exc)}") from exc

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
        encoded = EncodedAppend.untitled(events)
        config_json = json.dumps(config or {})

        def create(db: Db) -> AppendResult:
            now = time.time()
            with db.transaction():
                made = db.execute(
                    "INSERT INTO sessions (id, created_at, updated_at, authority, config)"
                    " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING RETURNING 1",
                    (session_id, now, now, authority_json, config_json),
                ).fetchone()
                if made is None:
                    raise SessionExists(f"session {session_id} already exists")
                return append_planned(db, self.path, session_id, encoded, operation, None)

        return await self._run(create, session_id)

    async def find_operation(self, session_id: str, reference: str, digest: str) -> str | None:
        """The receipt of ``reference`` when it named this same request (``digest``),
        None when unused; :class:`OperationConflict` when it named another request."""

        def find(db: Db) -> Any:
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

        def find(db: Db) -> Any:
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
        encoded = EncodedAppend.of(events)

        def append(db: Db) -> AppendResult:
            with db.transaction():
                return append_planned(db, self.path, session_id, encoded, operation, lease)

        return await self._run(append, session_id)

    # -- patches -----------------------------------------------------------------------------
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
        encoded = EncodedAppend.untitled(events)

        def append(db: Db) -> AppendResult:
            with db.transaction():
                result = append_planned(db, self.path, session_id, encoded, operation, None)
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

        def find(db: Db) -> Any:
            return db.execute(
                "SELECT info, octet_length(data), substring(data FROM %s FOR %s) FROM patches"
                " WHERE session_id=%s AND patch_id=%s",
                (offset + 1, limit, session_id, patch_id),
            ).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            return None
        return str(row[0]), int(row[1]), bytes(row[2])

    # -- leases -----------------------------------------------------------------------------
    async def acquire_lease(self, session_id: str, holder: str, seconds: float) -> Lease | None:
        """Take the session's lease for ``holder`` when nobody holds it or its holder let
        it lapse (the token then grows by one), or extend ``holder``'s own live lease;
        None while another Host holds it."""
        taken = await self.try_lease(session_id, holder, seconds)
        return taken if isinstance(taken, Lease) else None

    async def try_lease(self, session_id: str, holder: str, seconds: float) -> Lease | float:
        """As :meth:`acquire_lease`, but while another Host holds the lease, the seconds
        until it lapses unless renewed (0 or more), from the same statement: a Host
        waiting to take a session over asks again just after that, not a poll later."""

        def acquire(db: Db) -> Any:
            # The outer SELECT reads the lease as it was before the statement: when the
            # upsert took nothing, that is the holder's live lease.
            return db.execute(
                "WITH taken AS ("
                " INSERT INTO leases AS l (session_id, holder, token, expires_at)"
                " VALUES (%s, %s, 1, now() + make_interval(secs => %s))"
                " ON CONFLICT (session_id) DO UPDATE SET holder=EXCLUDED.holder,"
                " expires_at=EXCLUDED.expires_at,"
                " token=CASE WHEN l.holder=EXCLUDED.holder AND l.expires_at>=now()"
                " THEN l.token ELSE l.token + 1 END"
                " WHERE l.expires_at < now() OR l.holder=EXCLUDED.holder"
                " RETURNING token)"
                " SELECT (SELECT token FROM taken),"
                " (SELECT CASE WHEN isfinite(expires_at)"  # a released lease: -infinity
                " THEN EXTRACT(EPOCH FROM expires_at - now())::float8 ELSE 0 END"
                " FROM leases WHERE session_id=%s)",
                (session_id, holder, seconds, session_id),
            ).fetchone()

        try:
            token, remaining = await self._run(acquire, session_id)
        except StoreError as exc:
            if isinstance(exc.__cause__, psycopg.errors.ForeignKeyViolation):
                raise SessionNotFound(f"no stored session {session_id}") from exc
            raise
        if token is not None:
            return Lease(session_id, holder, int(token))
        return max(0.0, float(remaining or 0.0))

    async def renew_lease(self, lease: Lease, seconds: float) -> bool:
        """Extend ``lease`` by ``seconds`` from now; False once another Host took it (its
        token moved). A lapsed lease nobody took is renewed: its token fenced no one."""

        def renew(db: Db) -> Any:
            return db.execute(
                "UPDATE leases SET expires_at = now() + make_interval(secs => %s)"
                " WHERE session_id=%s AND holder=%s AND token=%s RETURNING 1",
                (seconds, lease.session_id, lease.holder, lease.token),
            ).fetchone()

        return await self._run(renew, lease.session_id) is not None

    async def release_lease(self, lease: Lease) -> None:
        """Give the session up at once (another Host may take it without waiting)."""

        def release(db: Db) -> None:
            db.execute(
                "UPDATE leases SET expires_at='-infinity'"
                " WHERE session_id=%s AND holder=%s AND token=%s",
                (lease.session_id, lease.holder, lease.token),
            )

        await self._run(release, lease.session_id)

    async def lease_holder(self, session_id: str) -> tuple[str, int, bool] | None:
        """The session's lease row as (holder, token, live), None when none was taken."""

        def find(db: Db) -> Any:
            return db.execute(
                "SELECT holder, token, expires_at >= now() FROM leases WHERE session_id=%s",
                (session_id,),
            ).fetchone()

        row = await self._run(find, session_id)
        return None if row is None else (str(row[0]), int(row[1]), bool(row[2]))

    # -- reading ----------------------------------------------------------------------------
    async def last_sequence(self, session_id: str) -> int:
        """The sequence of the session's newest event (0 before the first)."""

        def find(db: Db) -> Any:
            return db.execute(
                "SELECT last_sequence FROM sessions WHERE id=%s", (session_id,)
            ).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return count_field(row[0], self.path, session_id, "sessions.last_sequence")

    async def sequences(self) -> dict[str, int]:
        """Every session's newest sequence (the catch-up query of watching Hosts)."""

        def find(db: Db) -> Any:
            return db.execute("SELECT id, last_sequence FROM sessions").fetchall()

        return {str(r[0]): int(r[1]) for r in await self._run(find)}

    async def last_position(
        self, session_id: str, *, through: int | None = None
    ) -> Position | None:
        """The newest row's position (internal rows included) published by an event up
        to ``through`` (None: any), None without rows."""

        def find(db: Db) -> Any:
            return db.execute(
                "SELECT source_sequence, item_index FROM rows WHERE session_id=%s"
                " AND source_sequence <= COALESCE(%s::bigint, source_sequence)"
                " ORDER BY source_sequence DESC, item_index DESC LIMIT 1",
                (session_id, through),
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
        rows = await self._fetch(query, NATIVE_PAGE[include_internal], values)
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
        decoded = stored_rows(self.path, session_id, rows[:limit])
        more = len(rows) > limit
        return RowPage(
            through=fence, rows=decoded, next_after=decoded[-1].position if more else None
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
        return fence, built_rows(self.path, session_id, rows[:limit], build), len(rows) > limit

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
            fields += [(TOOL_ARGUMENTS, arguments_text(call.arguments)) for call in r.tool_calls]
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

        def find(db: Db) -> Any:
            return db.execute(
                SELECT_ROWS + " WHERE session_id=%s AND source_sequence=%s AND item_index=%s"
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
        rows = await self._fetch(EVENTS_AFTER, NATIVE_EVENTS_AFTER, values)
        return tuple(decode_event(self.path, session_id, r) for r in rows)

    async def load_config(self, session_id: str) -> dict[str, Any]:
        """The configuration object the session was created with."""

        def find(db: Db) -> Any:
            return db.execute("SELECT config FROM sessions WHERE id=%s", (session_id,)).fetchone()

        row = await self._run(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return json_object_field(row[0], self.path, session_id, "config")

    async def load_session(self, session_id: str) -> StoredSession:
        def load(db: Db) -> Any:
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
        def listing(db: Db) -> Any:
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
        def delete(db: Db) -> int:
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
        async with listen_for_commits(self._dsn, self.path) as receive:
            yield receive


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

    def open_connection(first: bool) -> Connection:
        connection = Connection(dsn, where, statement_seconds)
        try:
            db = connection.get()
            if first:
                prepare(db, where)
        except psycopg.Error as exc:
            connection.close()
            raise StoreError(f"cannot open store {where}: {describe(exc)}") from exc
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
                    teardown=Connection.close,
                )
            )
            for n in range(pool_size)
        ]
        reader = TrioReader(functools.partial(connect, dsn, statement_seconds))
        stack.callback(reader.close)
        yield PostgresStore(pool, where, dsn, reader)
