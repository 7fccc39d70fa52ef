"""The store's event log: sequences, positions, fenced pages, receipts, migration, readers."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.model import Message, ToolCall, to_json
from emelex.runtime import open_supervisor
from emelex.store import (
    SCHEMA_VERSION,
    NewEvent,
    OperationConflict,
    OperationRecord,
    Position,
    SessionNotFound,
    open_sqlite_store,
    turn_events,
)

CALL = ToolCall("id-1", "read_file", {"path": "n"})
TURN = [
    Message("user", "read notes"),
    Message("assistant", "", tool_calls=(CALL,)),
    Message("tool", "hello", tool_call_id="id-1"),
    Message("assistant", "It says hello.", reasoning="short"),
]


def test_turn_events_are_input_completions_results_then_settling() -> None:
    events = turn_events("t1", TURN)
    assert [e.kind for e in events] == [
        "turn.input",
        "model.completion",
        "tool.result",
        "model.completion",
        "turn.settled",
    ]
    assert [len(e.rows) for e in events] == [1, 1, 1, 1, 0]
    assert events[-1].payload == {"outcome": "committed", "rows": 4}
    inputs = [Message("system", "s"), Message("user", "u")]
    grouped = turn_events("t2", inputs, outcome="rolled_back")
    assert [e.kind for e in grouped] == ["turn.input", "turn.settled"]
    assert len(grouped[0].rows) == 2
    assert grouped[-1].payload["outcome"] == "rolled_back"
    with pytest.raises(ValueError, match="unknown turn outcome"):
        turn_events("t3", TURN, outcome="maybe")  # type: ignore[arg-type]


async def test_rows_are_addressed_by_position_under_a_fence(tmp_path: Path) -> None:
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s1", "{}")
        assert await store.last_sequence("s1") == 0
        first = await store.append_turn("s1", "t1", TURN)
        assert first.sequences == (1, 2, 3, 4, 5) and not first.replayed
        page = await store.history_page("s1", limit=2)
        assert page.through == 5
        assert [r.position for r in page.rows] == [Position(1, 0), Position(2, 0)]
        assert page.next_after == Position(2, 0)
        # A later turn does not leak into pages read under the first fence.
        await store.append_turn("s1", "t2", [Message("user", "more"), Message("assistant", "ok")])
        rest = await store.history_page("s1", through=page.through, after=page.next_after)
        assert [r.message() for r in rest.rows] == TURN[2:]
        assert rest.next_after is None and rest.through == 5
        tool_row = rest.rows[0]
        assert (tool_row.fields.tool_name, tool_row.fields.tool_call_id) == ("read_file", "id-1")
        assert rest.rows[1].fields.thinking == "short"
        newest = await store.history_page("s1", after=page.next_after, limit=100)
        assert newest.through == 8 and len(newest.rows) == 4
        assert await store.read_row("s1", Position(3, 0), through=5) == tool_row
        assert await store.read_row("s1", Position(6, 0), through=5) is None
        events = await store.events_after("s1", 4, limit=2)
        assert [(e.sequence, e.kind, e.turn_id) for e in events] == [
            (5, "turn.settled", "t1"),
            (6, "turn.input", "t2"),
        ]
        assert (await store.load_session("s1")).turns == 2


async def test_tool_names_reach_results_committed_in_a_later_append(tmp_path: Path) -> None:
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s1", "{}")
        await store.append_events("s1", [NewEvent("model.completion", "t1", rows=(TURN[1],))])
        await store.append_events("s1", [NewEvent("tool.result", "t1", rows=(TURN[2],))])
        page = await store.history_page("s1")
        assert page.rows[1].fields.tool_name == "read_file"


async def test_internal_rows_are_hidden_from_pages_but_open_by_position(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rows SET internal=1 WHERE role='tool'")
    db.close()
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        page = await store.history_page("s1")
        assert [r.fields.role for r in page.rows] == ["user", "assistant", "assistant"]
        hidden = await store.read_row("s1", Position(3, 0))
        assert hidden is not None and hidden.fields.internal
        everything = await store.history_page("s1", include_internal=True)
        assert len(everything.rows) == 4


async def test_a_retried_operation_returns_its_receipt_and_never_appends_twice(
    tmp_path: Path,
) -> None:
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s1", "{}")
        record = OperationRecord("op-1", "digest-a", '{"invocation": "i1"}')
        first = await store.append_turn("s1", "t1", TURN, operation=record)
        assert first.receipt == '{"invocation": "i1"}' and not first.replayed
        again = await store.append_turn("s1", "t1", TURN, operation=record)
        assert again.replayed and again.sequences == () and again.receipt == first.receipt
        assert await store.last_sequence("s1") == 5
        with pytest.raises(OperationConflict, match="op-1"):
            await store.append_turn(
                "s1", "t9", TURN, operation=OperationRecord("op-1", "digest-b", "{}")
            )
        assert await store.last_sequence("s1") == 5
        assert await store.operation_receipt("s1", "op-1") == '{"invocation": "i1"}'
        assert await store.operation_receipt("s1", "op-2") is None
        with pytest.raises(SessionNotFound):
            await store.last_sequence("nope")


def _schema_1_store(path: Path) -> None:
    """A store as emelex wrote it before the event log (schema 1)."""
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE sessions (id TEXT PRIMARY KEY, created_at REAL NOT NULL,
            updated_at REAL NOT NULL, authority TEXT NOT NULL, config TEXT NOT NULL,
            turns INTEGER NOT NULL DEFAULT 0, title TEXT NOT NULL DEFAULT '');
        CREATE TABLE messages (session_id TEXT NOT NULL REFERENCES sessions(id)
            ON DELETE CASCADE, seq INTEGER NOT NULL, turn_id TEXT NOT NULL,
            body TEXT NOT NULL, PRIMARY KEY (session_id, seq));
        INSERT INTO meta VALUES ('schema', '1');
        INSERT INTO sessions VALUES ('old', 1.0, 2.0, '{"version":1}', '{"model":"m"}', 2,
            'read notes');
        """
    )
    second = [Message("user", "again"), Message("assistant", "ok")]
    for seq, (turn, message) in enumerate([("t1", m) for m in TURN] + [("t2", m) for m in second]):
        db.execute("INSERT INTO messages VALUES ('old', ?, ?, ?)", (seq, turn, to_json(message)))
    db.commit()
    db.close()


async def test_a_schema_1_store_migrates_and_keeps_every_session(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _schema_1_store(path)
    async with open_supervisor("t"), open_sqlite_store(str(path)) as store:
        stored = await store.load_session("old")
        assert stored.messages == (*TURN, Message("user", "again"), Message("assistant", "ok"))
        assert (stored.turns, stored.config) == (2, {"model": "m"})
        assert await store.last_sequence("old") == 8
        settled = [e for e in await store.events_after("old", 0) if e.kind == "turn.settled"]
        assert [e.payload for e in settled] == [
            {"outcome": "committed", "rows": 4, "migrated": True},
            {"outcome": "committed", "rows": 2, "migrated": True},
        ]
        # The migrated session keeps growing like any other.
        await store.append_turn("old", "t3", [Message("user", "x"), Message("assistant", "y")])
        assert len((await store.load_session("old")).messages) == 8
    version = sqlite3.connect(path).execute("SELECT value FROM meta").fetchone()
    assert version == (str(SCHEMA_VERSION),)


async def test_a_failed_migration_leaves_the_old_store_untouched(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    _schema_1_store(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE messages SET body='{' WHERE seq=3")
    db.close()
    before = path.read_bytes()
    with pytest.raises(Exception, match=r"messages\[seq=3\]\.body"):
        async with open_supervisor("t"), open_sqlite_store(str(path)):
            pass
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta").fetchone() == ("1",)
    assert db.execute("SELECT COUNT(*) FROM messages").fetchone() == (6,)
    db.close()
    assert len(path.read_bytes()) >= len(before) - 1  # still the schema 1 file


async def test_readers_serve_reads_while_the_writer_holds_a_transaction(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_supervisor("t"), open_sqlite_store(path, readers=2) as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN)
        blocker = sqlite3.connect(path, timeout=0)
        blocker.execute("BEGIN IMMEDIATE")  # another writer holds the write lock
        try:
            with trio.fail_after(10):
                page = await store.history_page("s1")
                assert len(page.rows) == 4
                assert len((await store.load_session("s1")).messages) == 4
        finally:
            blocker.rollback()
            blocker.close()


async def test_limits_are_checked(tmp_path: Path) -> None:
    async with open_supervisor("t"), open_sqlite_store(str(tmp_path / "s.db")) as store:
        await store.create_session("s1", "{}")
        with pytest.raises(ValueError, match="limit"):
            await store.history_page("s1", limit=0)
        with pytest.raises(ValueError, match="limit"):
            await store.events_after("s1", 0, limit=10_000)
    with pytest.raises(ValueError, match="readers"):
        async with open_sqlite_store(str(tmp_path / "t.db"), readers=-1):
            pass


@settings(max_examples=25, deadline=None)
@given(
    turns=st.lists(st.integers(min_value=1, max_value=5), min_size=1, max_size=6),
    limit=st.integers(min_value=1, max_value=4),
    appended_while_paging=st.integers(min_value=0, max_value=3),
)
def test_paging_under_a_fence_sees_each_row_once_and_nothing_newer(
    tmp_path_factory: pytest.TempPathFactory,
    turns: list[int],
    limit: int,
    appended_while_paging: int,
) -> None:
    path = str(tmp_path_factory.mktemp("paging") / "s.db")

    async def scenario() -> None:
        async with open_supervisor("t"), open_sqlite_store(path) as store:
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
                if extra < appended_while_paging:
                    extra += 1
                    await store.append_turn("s1", f"late{extra}", [Message("user", "late")])
                page = await store.history_page(
                    "s1", through=page.through, after=page.next_after, limit=limit
                )
                seen.extend(page.rows)
            assert [r.message() for r in seen] == expected
            positions = [(r.position.source_sequence, r.position.item_index) for r in seen]
            assert positions == sorted(set(positions))

    trio.run(scenario)


def test_payloads_are_json(tmp_path: Path) -> None:
    event = NewEvent("queue.changed", None, {"depth": 1})
    assert json.loads(json.dumps(event.payload)) == {"depth": 1}
