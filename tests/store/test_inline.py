"""Small reads on the event loop's thread: the connection never waits for a lock, never
serves another thread, and a page read through it matches the checked page."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.store import NewEvent, Position, StoreCorrupt, open_sqlite_store
from emelex.store._inline import InlineReader, _InlineBusy


async def _store(path: str) -> None:
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        await store.create_session("s", "{}")
        rows = (Message.user("one"), Message.assistant("two"))
        await store.append_events("s", [NewEvent("turn.input", "t", rows=rows)])


async def test_a_locked_database_is_reported_at_once_not_waited_for(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    await _store(path)
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("PRAGMA locking_mode=EXCLUSIVE")
    locker.execute("BEGIN EXCLUSIVE")
    reader = InlineReader(path)
    try:
        began = time.monotonic()
        with pytest.raises(_InlineBusy):
            reader.read(lambda db: db.execute("SELECT count(*) FROM rows").fetchone())
        assert time.monotonic() - began < 1.0  # the default busy timeout would be 5 s
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # The lock gone, the same reader reads again.
    assert reader.read(lambda db: db.execute("SELECT count(*) FROM rows").fetchone()) == (2,)
    reader.close()


async def test_the_reader_serves_only_the_thread_that_opened_it(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    await _store(path)
    reader = InlineReader(path)
    reader.read(lambda db: db.execute("SELECT 1").fetchone())
    failures: list[BaseException] = []

    def elsewhere() -> None:
        try:
            reader.read(lambda db: db.execute("SELECT 1").fetchone())
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert len(failures) == 1 and isinstance(failures[0], _InlineBusy)
    reader.close()
    with pytest.raises(_InlineBusy):
        reader.read(lambda db: db.execute("SELECT 1").fetchone())


async def test_built_pages_equal_checked_pages_and_name_a_bad_field(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    await _store(path)
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        page = await store.history_page("s", limit=1)
        fence, built, more = await store.history_page_as("s", lambda *fields: fields, limit=1)
        (row,) = page.rows
        assert (fence, more) == (page.through, True)
        assert built == [
            (1, 0, "t", "user", "one", None, (), None, None, False),
        ]
        assert row.position == Position(1, 0)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE rows SET role=x'00' WHERE item_index=1")
    db.close()
    async with open_supervisor("t"), open_sqlite_store(path) as store:
        with pytest.raises(StoreCorrupt) as caught:
            await store.history_page_as("s", lambda *fields: fields)
        assert caught.value.field == "rows[1,1].role"
