"""The store is private to its owner: files 0600 (with SQLite's -wal and -shm), its
directory 0700, whatever the umask; a looser store is reported on open."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.store import open_sqlite_store
from emelex.store._permissions import make_private_directory


@pytest.fixture
def no_umask() -> Iterator[None]:
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_files_are_0600_whatever_the_umask(tmp_path: Path, no_umask: None) -> None:
    path = tmp_path / "s.db"
    async with open_supervisor("test"), open_sqlite_store(str(path)) as store:
        await store.create_session("s1", "{}")
        await store.append_turn("s1", "t1", [Message("user", "password=hunter2")])
        # While open, SQLite keeps its write-ahead log and shared memory beside the file.
        companions = sorted(os.listdir(tmp_path))
        assert companions == ["s.db", "s.db-shm", "s.db-wal"]
        for name in companions:
            assert mode(tmp_path / name) == 0o600, name


async def test_a_journal_file_is_0600_too(tmp_path: Path, no_umask: None) -> None:
    path = tmp_path / "s.db"
    async with open_supervisor("test"), open_sqlite_store(str(path)) as store:
        await store.create_session("s1", "{}")

        def journal(job: object) -> None:
            db = job.resource  # type: ignore[attr-defined]
            db.execute("PRAGMA journal_mode=DELETE")
            db.execute("PRAGMA locking_mode=EXCLUSIVE")
            db.execute("BEGIN IMMEDIATE")
            db.execute("UPDATE sessions SET title='x'")
            journal_mode = mode(Path(str(path) + "-journal"))
            db.execute("ROLLBACK")
            assert journal_mode == 0o600

        await store._worker.run(journal)


def test_private_directory_is_0700_whatever_the_umask(tmp_path: Path, no_umask: None) -> None:
    target = tmp_path / "a" / "emelex"
    make_private_directory(str(target))
    assert mode(target) == 0o700


async def test_a_looser_store_is_a_logged_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "s.db"
    async with open_supervisor("test"), open_sqlite_store(str(path)):
        pass
    assert caplog.records == []
    path.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="emelex.store"):
        async with open_supervisor("test"), open_sqlite_store(str(path)):
            pass
    (record,) = caplog.records
    assert record.name == "emelex.store" and record.levelno == logging.WARNING
    assert record.getMessage() == (
        f"store file {path} is accessible to other users (mode 0644); run: chmod 600 {path}"
    )
    assert mode(path) == 0o644  # reported, not silently changed
