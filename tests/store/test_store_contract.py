"""One contract, every store: the same tests run on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import psycopg
import pytest
import trio

from emelex.model import Message, ToolCall
from emelex.runtime import open_supervisor
from emelex.store import (
    SCHEMA_VERSION,
    CandidatePage,
    NewEvent,
    OperationConflict,
    OperationRecord,
    Position,
    SessionExists,
    SessionNotFound,
    Store,
    StoreError,
    open_sqlite_store,
)
from emelex.store.postgres import open_postgres_store

CALL = ToolCall("id-1", "read_file", {"path": "n"})
TURN = [
    Message("user", "read notes"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "hello", tool_call_id="id-1"),
    Message("assistant", "It says hello.", reasoning="short"),
]

Opener = Callable[[], AbstractAsyncContextManager[Store]]


class Backend:
    """How to open one backend's store and to reach under it (inject faults)."""

    def __init__(self, kind: str, location: str) -> None:
        self.kind = kind
        self.location = location

    def open(self) -> AbstractAsyncContextManager[Store]:
        @asynccontextmanager
        async def opened() -> AsyncIterator[Store]:
            async with open_supervisor("contract"):
                if self.kind == "sqlite":
                    async with open_sqlite_store(self.location) as store:
                        yield store
                else:
                    async with open_postgres_store(self.location, pool_size=2) as pg:
                        yield pg

        return opened()

    def execute(self, sql_sqlite: str, sql_postgres: str) -> None:
        if self.kind == "sqlite":
            with sqlite3.connect(self.location) as db:
                db.executescript(sql_sqlite)
            db.close()
        else:
            with psycopg.connect(self.location, autocommit=True) as pg:
                pg.execute(sql_postgres.encode())

    def count(self, sql: str) -> int:
        if self.kind == "sqlite":
            db = sqlite3.connect(self.location)
            try:
                return int(db.execute(sql).fetchone()[0])
            finally:
                db.close()
        with psycopg.connect(self.location, autocommit=True) as pg:
            row = pg.execute(sql.encode()).fetchone()
            assert row is not None
            return int(row[0])


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return Backend("sqlite", str(tmp_path / "s.db"))
    return Backend("postgres", request.getfixturevalue("postgres_dsn"))


async def test_round_trip_listing_and_reopen(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", '{"version":1}', {"model": "scripted:x"})
        await store.append_turn("s1", "t1", TURN)
        await store.append_turn("s1", "t2", [Message("user", "again"), Message("assistant", "ok")])
        with pytest.raises(SessionExists):
            await store.create_session("s1", "{}")
    async with backend.open() as store:  # durable across reopen
        stored = await store.load_session("s1")
        assert stored.messages == (*TURN, Message("user", "again"), Message("assistant", "ok"))
        assert stored.authority == '{"version":1}'
        assert (stored.config, stored.turns) == ({"model": "scripted:x"}, 2)
        assert await store.load_config("s1") == {"model": "scripted:x"}
        (summary,) = await store.list_sessions()
        assert (summary.id, summary.turns, summary.messages) == ("s1", 2, 6)
        assert summary.title == "read notes"
        exported = await store.export_session("s1")
        assert exported["authority"] == {"version": 1} and len(exported["messages"]) == 6
        await store.delete_session("s1")
        assert await store.list_sessions() == []
        for call in (
            store.load_session("s1"),
            store.delete_session("s1"),
            store.append_turn("s1", "t3", TURN),
            store.last_sequence("s1"),
            store.load_config("s1"),
            store.history_page("s1"),
        ):
            with pytest.raises(SessionNotFound):
                await call


async def test_rows_are_addressed_by_position_under_a_fence(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        assert await store.last_sequence("s1") == 0
        assert await store.last_position("s1") is None
        first = await store.append_turn("s1", "t1", TURN)
        assert first.sequences == (1, 2, 3, 4, 5) and not first.replayed
        page = await store.history_page("s1", limit=2)
        assert page.through == 5
        assert [r.position for r in page.rows] == [Position(1, 0), Position(2, 0)]
        assert page.next_after == Position(2, 0)
        await store.append_turn("s1", "t2", [Message("user", "more"), Message("assistant", "ok")])
        rest = await store.history_page("s1", through=page.through, after=page.next_after)
        assert [r.message() for r in rest.rows] == TURN[2:]
        assert rest.next_after is None and rest.through == 5
        tool_row = rest.rows[0]
        assert (tool_row.fields.tool_name, tool_row.fields.tool_call_id) == ("read_file", "id-1")
        assert rest.rows[1].fields.thinking == "short"
        assert page.rows[1].tool_calls[0].arguments == {"path": "n"}
        newest = await store.history_page("s1", after=page.next_after, limit=100)
        assert newest.through == 8 and len(newest.rows) == 4
        assert await store.read_row("s1", Position(3, 0), through=5) == tool_row
        assert await store.read_row("s1", Position(6, 0), through=5) is None
        assert await store.last_position("s1") == Position(7, 0)
        # Bounded by a fence: what a Host that applied events up to 5 may have published.
        assert await store.last_position("s1", through=5) == Position(4, 0)
        assert await store.last_position("s1", through=6) == Position(6, 0)
        assert await store.last_position("s1", through=0) is None
        events = await store.events_after("s1", 4, limit=2)
        assert [(e.sequence, e.kind, e.turn_id) for e in events] == [
            (5, "turn.settled", "t1"),
            (6, "turn.input", "t2"),
        ]
        assert events[0].payload == {"outcome": "committed", "rows": 4}


async def test_tool_names_reach_results_committed_in_a_later_append(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        await store.append_events("s1", [NewEvent("model.completion", "t1", rows=(TURN[1],))])
        await store.append_events("s1", [NewEvent("tool.result", "t1", rows=(TURN[2],))])
        page = await store.history_page("s1")
        assert page.rows[1].fields.tool_name == "read_file"


async def test_internal_rows_are_hidden_from_pages_but_open_by_position(
    backend: Backend,
) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN)
    backend.execute(
        "UPDATE rows SET internal=1 WHERE role='tool'",
        "UPDATE rows SET internal=true WHERE role='tool'",
    )
    async with backend.open() as store:
        page = await store.history_page("s1")
        assert [r.fields.role for r in page.rows] == ["user", "assistant", "assistant"]
        hidden = await store.read_row("s1", Position(3, 0))
        assert hidden is not None and hidden.fields.internal
        assert len((await store.history_page("s1", include_internal=True)).rows) == 4


async def test_a_retried_operation_returns_its_receipt_and_never_appends_twice(
    backend: Backend,
) -> None:
    async with backend.open() as store:
        created = await store.create_session(
            "s1",
            "{}",
            {"a": 1},
            events=[NewEvent("session.created", None, {"a": 1})],
            operation=OperationRecord("op-0", "d0", '{"created": true}'),
        )
        assert created.sequences == (1,) and created.receipt == '{"created": true}'
        record = OperationRecord("op-1", "digest-a", '{"invocation": "i1"}')
        first = await store.append_turn("s1", "t1", TURN, operation=record)
        assert first.receipt == '{"invocation": "i1"}' and not first.replayed
        again = await store.append_turn("s1", "t1", TURN, operation=record)
        assert again.replayed and again.sequences == () and again.receipt == first.receipt
        assert await store.last_sequence("s1") == 6
        with pytest.raises(OperationConflict, match="op-1"):
            await store.append_turn(
                "s1", "t9", TURN, operation=OperationRecord("op-1", "digest-b", "{}")
            )
        assert await store.last_sequence("s1") == 6
        assert await store.operation_receipt("s1", "op-1") == '{"invocation": "i1"}'
        assert await store.operation_receipt("s1", "op-2") is None
        assert await store.find_operation("s1", "op-1", "digest-a") == first.receipt
        assert await store.find_operation("s1", "op-2", "digest-a") is None
        with pytest.raises(OperationConflict):
            await store.find_operation("s1", "op-1", "digest-b")


async def test_a_failed_turn_write_leaves_nothing(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN[:1] + TURN[3:])
        # A failure in the middle of the transaction: the third row of turn t2.
        backend.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON rows WHEN NEW.turn_id='t2' AND"
            " NEW.role='tool' BEGIN SELECT RAISE(ABORT, 'injected failure'); END",
            "CREATE FUNCTION boom() RETURNS trigger AS $$ BEGIN"
            " IF NEW.turn_id='t2' AND NEW.role='tool' THEN"
            " RAISE EXCEPTION 'injected failure'; END IF; RETURN NEW; END $$"
            " LANGUAGE plpgsql;"
            " CREATE TRIGGER boom BEFORE INSERT ON rows FOR EACH ROW EXECUTE FUNCTION boom()",
        )
        with pytest.raises(StoreError, match="injected failure"):
            await store.append_turn("s1", "t2", TURN)
        assert (
            backend.count(
                "SELECT (SELECT COUNT(*) FROM rows WHERE turn_id='t2')"
                " + (SELECT COUNT(*) FROM events WHERE turn_id='t2')"
            )
            == 0
        )
        assert (await store.list_sessions())[0].turns == 1
        assert await store.last_sequence("s1") == 3
        # The store is still usable after the failed transaction.
        await store.append_turn("s1", "t3", [Message("user", "fine")])
        assert await store.last_sequence("s1") == 5


async def test_a_cancelled_write_is_whole_or_absent(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        with trio.CancelScope() as scope:
            scope.cancel()
            await store.append_turn("s1", "t1", TURN)
        count = len((await store.load_session("s1")).messages)
        assert count in (0, len(TURN))


async def test_a_newer_schema_is_refused(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
    backend.execute(
        "UPDATE meta SET value='99' WHERE key='schema'", "UPDATE schema_version SET version=99"
    )
    with pytest.raises(StoreError, match="newer than this emelex"):
        async with backend.open():
            pass


async def test_limits_are_checked(backend: Backend) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        with pytest.raises(ValueError, match="limit"):
            await store.history_page("s1", limit=0)
        with pytest.raises(ValueError, match="limit"):
            await store.events_after("s1", 0, limit=10_000)


@pytest.mark.parametrize(("turns", "limit", "late"), [([1, 3, 2], 1, 2), ([5, 1, 4, 2], 3, 3)])
async def test_paging_under_a_fence_sees_each_row_once_and_nothing_newer(
    backend: Backend, turns: list[int], limit: int, late: int
) -> None:
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        expected = []
        for number, answers in enumerate(turns):
            messages = [Message("user", f"q{number}")] + [
                Message("assistant", f"a{number}.{i}") for i in range(answers)
            ]
            await store.append_turn("s1", f"t{number}", messages)
            expected.extend(messages)
        page = await store.history_page("s1", limit=limit)
        seen = list(page.rows)
        extra = 0
        while page.next_after is not None:
            if extra < late:
                extra += 1
                await store.append_turn("s1", f"late{extra}", [Message("user", "late")])
            page = await store.history_page(
                "s1", through=page.through, after=page.next_after, limit=limit
            )
            seen.extend(page.rows)
        assert [r.message() for r in seen] == expected
        positions = [(r.position.source_sequence, r.position.item_index) for r in seen]
        assert positions == sorted(set(positions))


async def test_patches_are_stored_once_and_read_by_slices(backend: Backend) -> None:
    data = bytes(range(256)) * 40
    announce = [NewEvent("patch.captured", None, {"patchId": "p1"})]
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        record = OperationRecord("op-1", "digest-1", '{"receipt": 1}')
        first = await store.append_patch(
            "s1", "p1", '{"id": "p1"}', data, announce, operation=record
        )
        assert not first.replayed and first.sequences == (1,)
        again = await store.append_patch(
            "s1", "p1", '{"id": "p1"}', data, announce, operation=record
        )
        assert again.replayed and again.receipt == '{"receipt": 1}'
        assert await store.last_sequence("s1") == 1  # the replay stored nothing
        assert await store.read_patch("s1", "missing", 0, 10) is None
    async with backend.open() as store:  # durable across reopen
        pieces = b""
        offset = 0
        while offset < len(data):
            found = await store.read_patch("s1", "p1", offset, 4000)
            assert found is not None
            info, total, piece = found
            assert (info, total) == ('{"id": "p1"}', len(data))
            pieces += piece
            offset += len(piece)
        assert pieces == data
        assert await store.read_patch("s1", "p1", len(data), 10) == ('{"id": "p1"}', len(data), b"")


async def test_search_candidates_as_decides_on_a_worker_thread(backend: Backend) -> None:
    """The caller's ``decide`` gets the same page as ``search_candidates``, off the
    event loop, and its result (or its error) is the call's."""
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN)
        plain = await store.search_candidates("s1", "HELLO", case_sensitive=False)
        loop = threading.get_ident()
        seen: list[int] = []

        def decide(page: CandidatePage) -> tuple[Position, ...]:
            seen.append(threading.get_ident())
            assert page == plain
            return tuple(row.position for row in page.candidate_rows())

        found = await store.search_candidates_as("s1", "HELLO", decide, case_sensitive=False)
        assert Position(3, 0) in found
        assert found == tuple(r.position for r in plain.candidate_rows())
        assert seen and seen[0] != loop

        def refuse(page: CandidatePage) -> None:
            raise LookupError("refused")

        with pytest.raises(LookupError, match="refused"):
            await store.search_candidates_as("s1", "hello", refuse, case_sensitive=True)


async def test_a_schema_4_store_migrates_and_keeps_searching(backend: Backend) -> None:
    """Schema 5 (the SQLite store's search segment) from schema 4, on every store."""
    async with backend.open() as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN)
    backend.execute(
        "ALTER TABLE search_blocks DROP COLUMN segment_offset;"
        " ALTER TABLE search_blocks DROP COLUMN segment_length;"
        " UPDATE meta SET value='4' WHERE key='schema';",
        "UPDATE schema_version SET version=4",
    )
    async with backend.open() as store:
        await store.append_turn("s1", "t2", [Message("user", "hello again")])
        page = await store.search_candidates("s1", "hello", case_sensitive=True)
        bodies = [row.fields[0][1] for row in page.candidate_rows()]
        assert "hello" in bodies and "hello again" in bodies
    version = (
        "SELECT value FROM meta WHERE key='schema'"
        if backend.kind == "sqlite"
        else "SELECT version FROM schema_version"
    )
    assert backend.count(version) == SCHEMA_VERSION
