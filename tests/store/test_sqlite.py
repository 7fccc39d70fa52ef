"""The SQLite store: whole turns per transaction, authority beside the session."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio

from emelex.model import Message, ToolCall
from emelex.runtime import open_supervisor
from emelex.store import (
    SessionExists,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
    open_sqlite_store,
)

TURN = [
    Message("user", "read notes"),
    Message("assistant", "", tool_calls=(ToolCall("id-1", "read_file", {"path": "n"}),)),
    Message("tool", "hello", tool_call_id="id-1"),
    Message("assistant", "It says hello.", reasoning="short"),
]


async def test_round_trip_and_listing(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path) as store:
        await store.create_session("s1", '{"version":1}', {"model": "scripted:x"})
        await store.append_turn("s1", "t1", TURN)
        await store.append_turn("s1", "t2", [Message("user", "again"), Message("assistant", "ok")])
        with pytest.raises(SessionExists):
            await store.create_session("s1", "{}")
    async with open_sqlite_store(path) as store:  # durable across reopen
        stored = await store.load_session("s1")
        assert stored.messages == (*TURN, Message("user", "again"), Message("assistant", "ok"))
        assert stored.authority == '{"version":1}'
        assert stored.config == {"model": "scripted:x"}
        assert stored.turns == 2
        (summary,) = await store.list_sessions()
        assert (summary.id, summary.turns, summary.messages) == ("s1", 2, 6)
        assert summary.title == "read notes"
        exported = await store.export_session("s1")
        assert exported["authority"] == {"version": 1}
        assert len(exported["messages"]) == 6
        await store.delete_session("s1")
        assert await store.list_sessions() == []
        with pytest.raises(SessionNotFound):
            await store.load_session("s1")
        with pytest.raises(SessionNotFound):
            await store.delete_session("s1")
        with pytest.raises(SessionNotFound):
            await store.append_turn("s1", "t3", TURN)


async def test_a_failed_turn_write_leaves_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path) as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", TURN[:1] + TURN[3:])
        # Force a failure in the middle of the transaction: the third row of turn t2.
        db = sqlite3.connect(path)
        db.execute(
            "CREATE TRIGGER boom BEFORE INSERT ON rows WHEN NEW.turn_id='t2' AND NEW.role='tool'"
            " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
        db.commit()
        db.close()
        with pytest.raises(StoreError, match="injected failure") as caught:
            await store.append_turn("s1", "t2", TURN)
        assert isinstance(caught.value.__cause__, sqlite3.Error)
        stored_rows = (
            sqlite3.connect(path)
            .execute(
                "SELECT (SELECT COUNT(*) FROM rows WHERE turn_id='t2')"
                " + (SELECT COUNT(*) FROM events WHERE turn_id='t2')"
            )
            .fetchone()
        )
        assert stored_rows == (0,)
        assert (await store.list_sessions())[0].turns == 1


async def test_cancelled_write_completes_and_leaves_no_thread(tmp_path: Path) -> None:
    import threading

    path = str(tmp_path / "s.db")
    async with open_supervisor("store") as supervisor:
        async with open_sqlite_store(path) as store:
            await store.create_session("s1", "{}")
            with trio.CancelScope() as scope:
                scope.cancel()
                await store.append_turn("s1", "t1", TURN)
            # Either it never started or it completed whole: never a partial turn.
            count = len((await store.load_session("s1")).messages)
            assert count in (0, len(TURN))
        assert len(supervisor.snapshot()) == 0
    assert not [t for t in threading.enumerate() if t.name.startswith("emelex-worker")]


async def test_incompatible_file_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    db.execute("INSERT INTO meta VALUES ('schema', '99')")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="has schema 99, newer than this emelex"):
        async with open_sqlite_store(str(path)):
            pass
    (tmp_path / "bad.db").write_text("this is not sqlite" * 100)
    with pytest.raises(StoreError):
        async with open_sqlite_store(str(tmp_path / "bad.db")):
            pass


# -- damaged and hand-edited stores ---------------------------------------------------------
ALL_READS = {"load", "export", "list"}


async def _store_with(tmp_path: Path, sql: str) -> str:
    path = str(tmp_path / "s.db")
    async with open_supervisor("test"), open_sqlite_store(path) as store:
        await store.create_session("s1", '{"version":1}', {"model": "m"})
        await store.append_turn("s1", "t1", TURN)
    with sqlite3.connect(path) as db:
        db.execute(sql)
    db.close()
    return path


@pytest.mark.parametrize(
    ("sql", "field", "operations"),
    [
        ("UPDATE sessions SET config='[1' WHERE id='s1'", "config", {"load", "export"}),
        ("UPDATE sessions SET config='[1]' WHERE id='s1'", "config", {"load", "export"}),
        ("UPDATE sessions SET authority=7 WHERE id='s1'", "authority", {"load", "export"}),
        ("UPDATE sessions SET created_at=x'00' WHERE id='s1'", "created_at", ALL_READS),
        ("UPDATE sessions SET turns=-1 WHERE id='s1'", "turns", ALL_READS),
        ("UPDATE sessions SET title=x'00' WHERE id='s1'", "title", {"list"}),
        (
            "UPDATE rows SET message='{\"version\": 99}' WHERE source_sequence=3",
            "rows[3,0].message",
            {"load", "export"},
        ),
        (
            "UPDATE rows SET message=x'ff' WHERE source_sequence=1",
            "rows[1,0].message",
            {"load", "export"},
        ),
        ("UPDATE sessions SET last_sequence='x'", "sessions.last_sequence", {"append"}),
    ],
)
async def test_every_decode_error_is_store_corrupt_naming_session_and_field(
    tmp_path: Path, sql: str, field: str, operations: set[str]
) -> None:
    path = await _store_with(tmp_path, sql)
    async with open_supervisor("test"), open_sqlite_store(path) as store:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "load": lambda: store.load_session("s1"),
            "export": lambda: store.export_session("s1"),
            "list": store.list_sessions,
            "append": lambda: store.append_turn("s1", "t2", TURN),
        }
        for name, call in calls.items():
            if name in operations:
                with pytest.raises(StoreCorrupt) as caught:
                    await call()
                error = caught.value
                assert (error.session_id, error.field, error.path) == ("s1", field, path)
                assert f"session s1, field {field}: " in str(error)
                assert isinstance(error, StoreError)
            else:
                await call()


async def test_garbage_bytes_are_store_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"\x00garbage" * 512)
    with pytest.raises(StoreCorrupt) as caught:
        async with open_supervisor("test"), open_sqlite_store(str(path)):
            pass
    assert caught.value.session_id is None and caught.value.field is None
    assert str(caught.value) == f"store {path} is corrupt: file is not a database"


async def test_a_garbage_schema_version_is_store_corrupt(tmp_path: Path) -> None:
    path = await _store_with(tmp_path, "UPDATE meta SET value='one' WHERE key='schema'")
    with pytest.raises(StoreCorrupt) as caught:
        async with open_supervisor("test"), open_sqlite_store(path):
            pass
    assert caught.value.field == "meta.schema"
