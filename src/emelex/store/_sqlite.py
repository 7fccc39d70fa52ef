"""The embedded SQLite store: sessions, their authority snapshots, and each session's
append-only event log with the history rows its events publish.

One writer thread owns the writing connection and reader threads own one connection
each (SQLite objects must stay on their thread; WAL lets readers run beside the writer).
Every write of a turn is one transaction, so a stored session always holds whole turns.
Messages are stored in emelex's versioned JSON form. Every value read back is checked
(SQLite columns take any type, and people edit stores by hand): a bad one is a
:class:`StoreCorrupt` naming the session and field. The file is created 0600 (its -wal
and -shm follow), and a looser file is reported on open.

Checked decoding (``_decode.py``) and the append plan (``_append_plan.py``) are shared
with the PostgreSQL store; this module keeps only SQLite's statements and threads.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar

import trio

from emelex.model import Message, to_json
from emelex.runtime import DedicatedWorker, WorkerJob, open_dedicated_worker
from emelex.store._append_plan import EncodedAppend
from emelex.store._decode import (
    MAX_PAGE_ROWS,
    SessionSummary,
    StoredSession,
    count_field,
    decode_event,
    decode_session,
    json_object_field,
    number_field,
    text_field,
)
from emelex.store._errors import (
    OperationConflict,
    SessionExists,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
)
from emelex.store._inline import INLINE_ROWS, InlineReader, _InlineBusy
from emelex.store._log import (
    AppendResult,
    NewEvent,
    OperationRecord,
    Outcome,
    Position,
    RowPage,
    StoredEvent,
    StoredRow,
    turn_events,
)
from emelex.store._schema import connect
from emelex.store._search import CandidatePage, _BadBlock, scan_blocks
from emelex.store._sqlite_append import append_planned
from emelex.store._sqlite_pages import (
    SELECT_PAGE,
    SELECT_ROWS,
    built_rows,
    fence_and_rows,
    stored_row,
)

T = TypeVar("T")
R = TypeVar("R")

MAX_READERS = 16


#: SQLite's primary result codes for a damaged file or one that is not a database.
_CORRUPT_CODES = frozenset({11, 26})  # SQLITE_CORRUPT, SQLITE_NOTADB


def _map_sqlite(exc: sqlite3.Error, path: str, session_id: str | None = None) -> StoreError:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _CORRUPT_CODES:
        return StoreCorrupt(str(exc), path=path, session_id=session_id)
    return StoreError(f"store {path}: {exc}")


class SqliteStore:
    """Durable sessions in one SQLite file: an append-only event log per session, history
    rows derived from it, and operation receipts. Create with :func:`open_sqlite_store`.

    One writer thread applies every change (a turn's events, rows and receipt are one
    transaction); reader threads serve reads concurrently (WAL). Every method is async,
    checkpoints, and runs on one of those threads; a cancelled call waits until its
    statement has finished (a transaction is never left half-applied).
    """

    def __init__(
        self,
        worker: DedicatedWorker[sqlite3.Connection],
        path: str,
        readers: Sequence[DedicatedWorker[sqlite3.Connection]] = (),
    ) -> None:
        self._worker = worker
        self._readers = tuple(readers) or (worker,)
        self._next_reader = 0
        self.path = path
        self._inline = InlineReader(path)

    async def _run(self, fn: Any, session_id: str | None = None) -> Any:
        try:
            return await self._worker.run(fn)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path, session_id) from exc

    async def _read(self, fn: Any, session_id: str | None = None) -> Any:
        reader = self._readers[self._next_reader % len(self._readers)]
        self._next_reader += 1
        try:
            return await reader.run(fn)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, self.path, session_id) from exc

    async def _read_snapshot(
        self, fn: Callable[[sqlite3.Connection], T], session_id: str, *, small: bool
    ) -> T:
        """``fn(connection)`` in one read transaction: on the calling thread when the
        read is ``small`` (bounded by the caller) and the database lets it read without
        waiting, else on a reader thread."""
        if small:
            try:
                result = self._inline.read(fn)
            except _InlineBusy:
                pass
            except sqlite3.Error as exc:
                raise _map_sqlite(exc, self.path, session_id) from exc
            else:
                await trio.lowlevel.checkpoint()
                return result

        def job(job: WorkerJob[sqlite3.Connection, T]) -> T:
            db = job.resource
            db.execute("BEGIN")
            try:
                return fn(db)
            finally:
                db.execute("COMMIT")

        result_: T = await self._read(job, session_id)
        return result_

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

        def create(job: WorkerJob[sqlite3.Connection, AppendResult]) -> AppendResult:
            db = job.resource
            now = time.time()
            db.execute("BEGIN IMMEDIATE")
            try:
                try:
                    db.execute(
                        "INSERT INTO sessions (id, created_at, updated_at, authority, config)"
                        " VALUES (?, ?, ?, ?, ?)",
                        (session_id, now, now, authority_json, json.dumps(config or {})),
                    )
                except sqlite3.IntegrityError as exc:
                    raise SessionExists(f"session {session_id} already exists") from exc
                result = append_planned(db, self.path, session_id, encoded, operation)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        result: AppendResult = await self._run(create, session_id)
        return result

    async def find_operation(self, session_id: str, reference: str, digest: str) -> str | None:
        """The receipt of ``reference`` when it named this same request (``digest``),
        None when the reference is unused; :class:`OperationConflict` when it named
        another request."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT digest, receipt FROM operations WHERE session_id=? AND reference=?",
                (session_id, reference),
            ).fetchone()

        row = await self._read(find, session_id)
        if row is None:
            return None
        if row[0] != digest:
            raise OperationConflict(session_id, reference)
        return text_field(row[1], self.path, session_id, "operations.receipt")

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        messages: Sequence[Message],
        *,
        outcome: Outcome = "committed",
        operation: OperationRecord | None = None,
    ) -> AppendResult:
        """Append one settled turn (its input, completions, tool results and settling
        event) in a single transaction, with ``operation``'s receipt when given."""
        return await self.append_events(
            session_id, turn_events(turn_id, messages, outcome=outcome), operation=operation
        )

    async def append_events(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        operation: OperationRecord | None = None,
    ) -> AppendResult:
        """Append ``events`` (and the rows they publish) in one transaction.

        With ``operation``: when its reference was used before with the same digest,
        nothing is appended and the original receipt is returned (``replayed``); with
        another digest, :class:`OperationConflict` is raised and nothing changes.
        """
        encoded = EncodedAppend.of(events)

        def append(job: WorkerJob[sqlite3.Connection, AppendResult]) -> AppendResult:
            db = job.resource
            db.execute("BEGIN IMMEDIATE")
            try:
                result = append_planned(db, self.path, session_id, encoded, operation)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        result: AppendResult = await self._run(append, session_id)
        return result

    # -- captured patches ----------------------------------------------------------------------
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
        """Store an immutable patch with the events announcing it and ``operation``'s
        receipt, in one transaction. A replayed operation stores nothing and returns the
        original receipt (``replayed``), as :meth:`append_events` does."""
        encoded = EncodedAppend.untitled(events)

        def append(job: WorkerJob[sqlite3.Connection, AppendResult]) -> AppendResult:
            db = job.resource
            db.execute("BEGIN IMMEDIATE")
            try:
                result = append_planned(db, self.path, session_id, encoded, operation)
                if not result.replayed:
                    db.execute(
                        "INSERT INTO patches (session_id, patch_id, info, data)"
                        " VALUES (?, ?, ?, ?)",
                        (session_id, patch_id, info_json, data),
                    )
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        result: AppendResult = await self._run(append, session_id)
        return result

    async def read_patch(
        self, session_id: str, patch_id: str, offset: int, limit: int
    ) -> tuple[str, int, bytes] | None:
        """``(info_json, total_bytes, data[offset:offset + limit])`` of a stored patch,
        None when the session has no such patch. Only the slice is read."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT info, length(data), substr(data, ?, ?) FROM patches"
                " WHERE session_id=? AND patch_id=?",
                (offset + 1, limit, session_id, patch_id),
            ).fetchone()

        row = await self._read(find, session_id)
        if row is None:
            return None
        info = text_field(row[0], self.path, session_id, "patches.info")
        size = count_field(row[1], self.path, session_id, "patches.data")
        data = b"" if row[2] in ("", None) else row[2]  # SQLite's substr of an empty blob
        if not isinstance(data, bytes):
            raise StoreCorrupt(
                "expected bytes", path=self.path, session_id=session_id, field="patches.data"
            )
        return info, size, data

    async def operation_receipt(self, session_id: str, reference: str) -> str | None:
        """The receipt recorded for ``reference``, or None when the store holds none
        (which proves nothing about a request whose response was lost in transit)."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT receipt FROM operations WHERE session_id=? AND reference=?",
                (session_id, reference),
            ).fetchone()

        row = await self._read(find, session_id)
        return (
            None if row is None else text_field(row[0], self.path, session_id, "operations.receipt")
        )

    # -- reading ----------------------------------------------------------------------------
    async def last_sequence(self, session_id: str) -> int:
        """The sequence of the session's newest event (0 before the first)."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT last_sequence FROM sessions WHERE id=?", (session_id,)
            ).fetchone()

        row = await self._read(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return count_field(row[0], self.path, session_id, "sessions.last_sequence")

    async def last_position(
        self, session_id: str, *, through: int | None = None
    ) -> Position | None:
        """The newest row's position (internal rows included) published by an event up
        to ``through`` (None: any), None without rows."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT source_sequence, item_index FROM rows WHERE session_id=?"
                " AND source_sequence<=COALESCE(?, source_sequence)"
                " ORDER BY source_sequence DESC, item_index DESC LIMIT 1",
                (session_id, through),
            ).fetchone()

        row = await self._read(find, session_id)
        if row is None:
            return None
        field = "rows.position"
        return Position(
            count_field(row[0], self.path, session_id, field),
            count_field(row[1], self.path, session_id, field),
        )

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
        if limit < 1 or limit > MAX_PAGE_ROWS:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_ROWS}")
        start = after if after is not None else Position(0, -1)

        def page(db: sqlite3.Connection) -> Any:
            # The caller holds one read transaction: one snapshot for the fence and rows.
            return fence_and_rows(
                db, SELECT_ROWS, session_id, through, start, include_internal, limit
            )

        fence, rows = await self._read_snapshot(page, session_id, small=limit <= INLINE_ROWS)
        fence = count_field(fence, self.path, session_id, "sessions.last_sequence")
        decoded = tuple(stored_row(self.path, session_id, r) for r in rows[:limit])
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
        """As :meth:`history_page`, built by the caller: ``(fence, rows, more)`` where
        each row is ``build(source_sequence, item_index, turn_id, role, body, thinking,
        tool_calls, tool_call_id, tool_name, internal)`` of checked values, and ``more``
        says that rows remain after the last one. The message itself is not read.

        The Host's history pages come here: building its wire rows straight from the
        checked values keeps a page within a small factor of the bare query.
        """
        if limit < 1 or limit > MAX_PAGE_ROWS:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_ROWS}")
        start = after if after is not None else Position(0, -1)

        def page(db: sqlite3.Connection) -> Any:
            return fence_and_rows(
                db, SELECT_PAGE, session_id, through, start, include_internal, limit
            )

        fence, rows = await self._read_snapshot(page, session_id, small=limit <= INLINE_ROWS)
        fence = count_field(fence, self.path, session_id, "sessions.last_sequence")
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
        """Rows after ``after`` under the fence that may contain ``query``, with their
        searchable fields, for the exact matcher to check: every row that can match
        (case-sensitively, or by simple case folding) is among them, internal rows never
        are (see ``_search``).

        Bounded per page (see ``_search``: whole blocks up to a byte budget, a bounded
        number of rows returned); ``next_after`` is the last row scanned while rows
        remain, so a page may return no row at all. Runs on a reader thread.
        """
        return await self.search_candidates_as(
            session_id,
            query,
            _same_page,
            case_sensitive=case_sensitive,
            through=through,
            after=after,
        )

    async def search_candidates_as(
        self,
        session_id: str,
        query: str,
        decide: Callable[[CandidatePage], T],
        *,
        case_sensitive: bool,
        through: int | None = None,
        after: Position | None = None,
        spans: bool = False,
    ) -> T:
        """``decide(page)`` for the page :meth:`search_candidates` returns, run on the
        same reader thread after the scan: one thread hop per page instead of two (under
        load each hop waits for a CPU). ``decide`` must be bounded and thread-safe.
        With ``spans`` (for a search without whole words), the scan matches the
        common row itself where it can and gives its matches as ``SearchHit``s
        (see ``_search.scan_blocks``)."""
        start = after if after is not None else Position(0, -1)

        def scan(db: sqlite3.Connection) -> T:
            row = db.execute(
                "SELECT last_sequence FROM sessions WHERE id=?", (session_id,)
            ).fetchone()
            if row is None:
                raise SessionNotFound(f"no stored session {session_id}")
            newest = row[0] if through is None else through
            fence = count_field(newest, self.path, session_id, "sessions.last_sequence")
            try:
                page = scan_blocks(
                    db,
                    session_id,
                    query,
                    case_sensitive=case_sensitive,
                    through=fence,
                    after=start,
                    spans=spans,
                )
            except _BadBlock as exc:
                raise StoreCorrupt(
                    str(exc), path=self.path, session_id=session_id, field="search_blocks"
                ) from exc
            return decide(page)

        return await self._read_snapshot(scan, session_id, small=False)

    async def read_row(
        self, session_id: str, position: Position, *, through: int | None = None
    ) -> StoredRow | None:
        """The row at ``position`` (internal rows too) if an event up to ``through``
        published it, else None."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                SELECT_ROWS + " WHERE session_id=? AND source_sequence=? AND item_index=?"
                " AND source_sequence <= COALESCE(?, source_sequence)",
                (session_id, position.source_sequence, position.item_index, through),
            ).fetchone()

        row = await self._read(find, session_id)
        return None if row is None else stored_row(self.path, session_id, row)

    async def events_after(
        self, session_id: str, after: int, *, limit: int = 100
    ) -> tuple[StoredEvent, ...]:
        """Events with a sequence above ``after``, oldest first, at most ``limit``."""
        if limit < 1 or limit > MAX_PAGE_ROWS:
            raise ValueError(f"limit must be between 1 and {MAX_PAGE_ROWS}")

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT sequence, kind, turn_id, at, payload FROM events"
                " WHERE session_id=? AND sequence>? ORDER BY sequence LIMIT ?",
                (session_id, after, limit),
            ).fetchall()

        rows = await self._read(find, session_id)
        return tuple(decode_event(self.path, session_id, r) for r in rows)

    async def load_config(self, session_id: str) -> dict[str, Any]:
        """The configuration object the session was created with."""

        def find(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT config FROM sessions WHERE id=?", (session_id,)
            ).fetchone()

        row = await self._read(find, session_id)
        if row is None:
            raise SessionNotFound(f"no stored session {session_id}")
        return json_object_field(row[0], self.path, session_id, "config")

    async def load_session(self, session_id: str) -> StoredSession:
        def load(job: WorkerJob[sqlite3.Connection, tuple[Any, list[Any]]]) -> Any:
            db = job.resource
            db.execute("BEGIN")
            try:
                row = db.execute(
                    "SELECT id, created_at, updated_at, authority, config, turns FROM sessions"
                    " WHERE id=?",
                    (session_id,),
                ).fetchone()
                if row is None:
                    raise SessionNotFound(f"no stored session {session_id}")
                bodies = db.execute(
                    "SELECT source_sequence, item_index, message FROM rows WHERE session_id=?"
                    " ORDER BY source_sequence, item_index",
                    (session_id,),
                ).fetchall()
            finally:
                db.execute("COMMIT")
            return row, bodies

        row, bodies = await self._read(load, session_id)
        return decode_session(self.path, session_id, row, bodies)

    async def list_sessions(self) -> list[SessionSummary]:
        def listing(job: WorkerJob[sqlite3.Connection, Any]) -> Any:
            return job.resource.execute(
                "SELECT s.id, s.created_at, s.updated_at, s.turns, s.title,"
                " (SELECT COUNT(*) FROM rows r WHERE r.session_id=s.id)"
                " FROM sessions s ORDER BY s.updated_at DESC, s.id"
            ).fetchall()

        rows = await self._read(listing)
        path = self.path
        summaries = []
        for r in rows:
            session_id = r[0] if isinstance(r[0], str) else repr(r[0])
            summaries.append(
                SessionSummary(
                    id=text_field(r[0], path, session_id, "id"),
                    created_at=number_field(r[1], path, session_id, "created_at"),
                    updated_at=number_field(r[2], path, session_id, "updated_at"),
                    turns=count_field(r[3], path, session_id, "turns"),
                    title=text_field(r[4], path, session_id, "title"),
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
            "authority": json_object_field(stored.authority, self.path, stored.id, "authority"),
            "messages": [json.loads(to_json(message)) for message in stored.messages],
        }


@asynccontextmanager
async def open_sqlite_store(path: str, *, readers: int = 2) -> AsyncIterator[SqliteStore]:
    """Open (creating or migrating if needed, mode 0600) the store at ``path``: one
    writer thread and ``readers`` reader threads, each with its own connection. A store
    file (or its -wal, -shm, -journal) that other users may access is logged as a warning
    on the ``emelex.store`` logger.

    Raises :class:`StoreError` when the file cannot be opened or has a newer schema, and
    :class:`StoreCorrupt` when it is not a sound SQLite database. The connections are
    closed and the threads joined when the block exits.
    """
    if readers < 0 or readers > MAX_READERS:
        raise ValueError(f"readers must be between 0 and {MAX_READERS}")

    def open_writer() -> sqlite3.Connection:
        try:
            return connect(path)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, path) from exc

    def open_reader() -> sqlite3.Connection:
        try:
            return connect(path, readonly=True)
        except sqlite3.Error as exc:
            raise _map_sqlite(exc, path) from exc

    async with AsyncExitStack() as stack:
        writer = await stack.enter_async_context(
            open_dedicated_worker("sqlite-writer", setup=open_writer, teardown=_close)
        )
        pool = [
            await stack.enter_async_context(
                open_dedicated_worker(f"sqlite-reader-{n}", setup=open_reader, teardown=_close)
            )
            for n in range(readers)
        ]
        store = SqliteStore(writer, path, pool)
        try:
            yield store
        finally:
            store._inline.close()


def _same_page(page: CandidatePage) -> CandidatePage:
    return page


def _close(db: sqlite3.Connection) -> None:
    db.close()
