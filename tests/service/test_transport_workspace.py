"""The session's workspace through the wire: git status and diff, patches, file listing,
watching and reading give the same answers in process, over the Unix socket and over TCP
(``open_host``, tests/service/conftest.py)."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
import trio

from emelex.contracts import FilesChanged, FilesReady, GitTextDiff, WorkspacePath
from emelex.service import FileSnapshot, InvalidWorkspacePath, UnknownSession, assemble_file
from emelex.testing import Say
from tests.service.conftest import OpenHost
from tests.service.gitrepo import commit, git_home, init, write
from tests.service.test_host import agent

__all__ = ["git_home"]  # the fixture, used by name


async def test_git_status_diff_and_patch_through_every_way_in(
    tmp_path: Path, open_host: OpenHost, git_home: Path
) -> None:
    work = init(tmp_path / "work")
    write(work, "a.txt", "one\n")
    commit(work)
    write(work, "a.txt", "one\ntwo\n")
    write(work, b"new-\xff.txt", "fresh\n")
    async with open_host(tmp_path / "root", agents={"helper": agent([Say("ok")])}) as host:
        session = (await host.create_session("helper", work, operation="c")).session
        status = await host.git_status(session.id)
        assert status is not None and status.head is not None
        assert [base64.b64decode(e.path) for e in status.worktree] == [b"a.txt"]
        assert [base64.b64decode(e.path) for e in status.untracked] == [b"new-\xff.txt"]
        diff = await host.git_diff(session.id, "worktree", b"a.txt")
        assert isinstance(diff, GitTextDiff) and "+two" in diff.patch
        receipt = await host.snapshot_patch(session.id, operation="p1")
        assert await host.snapshot_patch(session.id, operation="p1") == receipt
        data = b""
        offset: int | None = 0
        while offset is not None:
            page = await host.read_patch(session.id, receipt.patch.id, offset=offset, limit=64)
            data += base64.b64decode(page.data)
            offset = page.next_offset
        assert len(data) == receipt.patch.bytes
        assert b"+two" in data and b"fresh" in data
        with pytest.raises(UnknownSession):
            await host.git_status("s-missing")


async def test_files_listed_watched_and_read_through_every_way_in(
    tmp_path: Path, open_host: OpenHost
) -> None:
    work = tmp_path / "work"
    (work / "docs").mkdir(parents=True)
    (work / "docs" / "readme.md").write_text("héllo\n" * 10_000)
    (work / "b.txt").write_bytes(b"b")
    async with open_host(tmp_path / "root", agents={"helper": agent([Say("ok")])}) as host:
        session = (await host.create_session("helper", work, operation="c")).session
        page = await host.list_files(session.id)
        names = [base64.b64decode(e.path.bytes_base64) for e in page.entries]
        assert names == [b"b.txt", b"docs"] and page.next_after is None
        inner = await host.list_files(session.id, WorkspacePath.of("docs"))
        assert [base64.b64decode(e.path.bytes_base64) for e in inner.entries] == [b"docs/readme.md"]
        async with host.read_file(session.id, WorkspacePath.of("docs/readme.md")) as updates:
            result = await assemble_file(updates)
        assert isinstance(result, FileSnapshot)
        assert result.text == "héllo\n" * 10_000
        assert result.digest.endswith(hashlib.sha256(result.data).hexdigest())
        with pytest.raises(InvalidWorkspacePath):
            await host.list_files(session.id, WorkspacePath.of("no-such-dir"))
        with trio.fail_after(30):
            async with host.watch_files(session.id) as changes:
                first = await changes.__anext__()
                assert isinstance(first, FilesReady)
                (work / "c.txt").write_text("c")
                second = await changes.__anext__()
                assert isinstance(second, FilesChanged)
