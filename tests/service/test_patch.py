"""snapshot_patch / read_patch: immutable completed-work patches that git apply reproduces."""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, assume, given, settings

from emelex.app import Agent
from emelex.contracts import ContractError, PatchPage
from emelex.service import (
    Host,
    OperationConflict,
    ServiceError,
    SubmoduleUnsupported,
    UnknownPatch,
)
from emelex.service.workspace._patch import capture_sync
from emelex.store import SCHEMA_VERSION, open_sqlite_store
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool
from tests.service.gitrepo import commit, git, git_home, init, needs_git, write
from tests.service.test_git import _edit as edit
from tests.service.test_git import edits

pytestmark = needs_git
__all__ = ["git_home"]  # the fixture, imported for pytest


def helper() -> Agent:
    model = ScriptedModel([])
    return Agent.builder().name("helper").instructions("Help.").model(model).build()


async def read_all(host: Host, session_id: str, patch_id: str, limit: int) -> list[PatchPage]:
    pages = [await host.read_patch(session_id, patch_id, limit=limit)]
    while pages[-1].next_offset is not None:
        pages.append(
            await host.read_patch(session_id, patch_id, offset=pages[-1].next_offset, limit=limit)
        )
    return pages


def joined(pages: list[PatchPage]) -> bytes:
    data = b"".join(base64.b64decode(page.data) for page in pages)
    info = pages[0].patch
    assert len(data) == info.bytes
    assert "sha256:" + hashlib.sha256(data).hexdigest() == info.digest
    return data


def tree(root: Path) -> dict[bytes, tuple[str, bytes]]:
    """Every file and link below ``root`` (not .git): kind (with the x bit) and content."""
    found = {}
    base = os.fsencode(root)
    for directory, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d != b".git"]
        for name in files + [d for d in dirs if os.path.islink(os.path.join(directory, d))]:
            path = os.path.join(directory, name)
            info = os.lstat(path)
            relative = os.path.relpath(path, base)
            if stat.S_ISLNK(info.st_mode):
                found[relative] = ("link", os.readlink(path))
            else:
                kind = "exec" if info.st_mode & stat.S_IXUSR else "file"
                with open(path, "rb") as handle:
                    found[relative] = (kind, handle.read())
    return found


def busy_repo(root: Path) -> None:
    init(root)
    write(root, "text.txt", "".join(f"line {n}\n" for n in range(50)))
    write(root, "crlf.txt", b"a\r\nb\r\nc\r\n")
    write(root, "image.bin", bytes(range(256)) * 40)
    write(root, "gone.txt", "deleted later\n")
    write(root, "run.sh", "#!/bin/sh\necho hi\n")
    write(root, b"caf\xc3\xa9/n\xe9e.txt", b"non-UTF-8 name\n")
    write(root, "type.txt", "becomes a link\n")
    write(root, "staged-back.txt", "same at the end\n")
    os.symlink("text.txt", root / "link")
    commit(root)
    write(root, "text.txt", "".join(f"line {n}\n" for n in range(50) if n != 7) + "tail")
    write(root, "crlf.txt", b"a\r\nB\r\nc\r\nd\r\n")
    write(root, "image.bin", bytes(range(255, -1, -1)) * 41)
    (root / "gone.txt").unlink()
    os.chmod(root / "run.sh", 0o755)
    write(root, b"caf\xc3\xa9/n\xe9e.txt", b"changed\n")
    (root / "type.txt").unlink()
    os.symlink("crlf.txt", root / "type.txt")
    write(root, "staged-back.txt", "staged then reverted\n")
    git(root, "add", "staged-back.txt")
    write(root, "staged-back.txt", "same at the end\n")
    (root / "link").unlink()
    os.symlink("crlf.txt", root / "link")
    write(root, "new/deep/file.txt", "untracked\n")
    write(root, "new/blob.bin", b"\x00\xff" * 3000)
    write(root, "new/empty.txt", b"")


async def test_git_apply_of_the_patch_reproduces_the_working_tree(
    tmp_path: Path, git_home: Path
) -> None:
    root = tmp_path / "repo"
    busy_repo(root)
    expected = tree(root)
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        session = (await host.create_session("helper", root, operation="c")).session
        receipt = await host.snapshot_patch(session.id, operation="snap-1")
        assert receipt.receipt.action == "snapshotPatch"
        assert receipt.patch.captured_sequence == receipt.receipt.sequence
        assert receipt.patch.head == git(root, "rev-parse", "HEAD").decode().strip()
        assert receipt.patch.files == 11  # everything but staged-back.txt
        data = joined(await read_all(host, session.id, receipt.patch.id, limit=1000))
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(root), str(clone))
    git(clone, "apply", "--index", "-", input=data)
    assert tree(clone) == expected
    # And the patch reverses cleanly (complete source images of every binary change).
    git(clone, "apply", "-R", "--index", "-", input=data)
    assert git(clone, "status", "--porcelain") == b""


async def test_the_patch_is_immutable_across_changes_retries_and_restarts(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    commit(root)
    write(root, "a.txt", "first\n")
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        session_id = (await host.create_session("helper", root, operation="c")).session.id
        first = await host.snapshot_patch(session_id, operation="snap-1")
        original = joined(await read_all(host, session_id, first.patch.id, limit=7))
        assert b"+first\n" in original
        write(root, "a.txt", "second\n")
        assert await host.snapshot_patch(session_id, operation="snap-1") == first
        second = await host.snapshot_patch(session_id, operation="snap-2")
        assert second.patch.id != first.patch.id and second.patch.digest != first.patch.digest
        assert joined(await read_all(host, session_id, first.patch.id, limit=64)) == original
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        assert joined(await read_all(host, session_id, first.patch.id, limit=1 << 18)) == original
        assert await host.snapshot_patch(session_id, operation="snap-1") == first
        page = await host.read_patch(session_id, first.patch.id, offset=len(original))
        assert page.data == "" and page.next_offset is None


async def test_reading_errors_are_typed(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    plain = tmp_path / "plain"
    plain.mkdir()
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        session_id = (await host.create_session("helper", root, operation="c")).session.id
        empty = await host.snapshot_patch(session_id, operation="snap")
        assert (empty.patch.bytes, empty.patch.files, empty.patch.head) == (0, 0, None)
        with pytest.raises(UnknownPatch):
            await host.read_patch(session_id, "p-nothing")
        with pytest.raises(ServiceError):
            await host.read_patch(session_id, empty.patch.id, offset=1)
        with pytest.raises(ContractError):
            await host.read_patch(session_id, empty.patch.id, limit=0)
        other = (await host.create_session("helper", plain, operation="p")).session.id
        with pytest.raises(ServiceError):
            await host.snapshot_patch(other, operation="snap")
        # A reference that named another mutation of the session is a conflict.
        await host.send(session_id, "hello", operation="used")
        with pytest.raises(OperationConflict):
            await host.snapshot_patch(session_id, operation="used")
    init(root / "nested")
    write(root, "nested/x.txt", "x\n")
    with pytest.raises(SubmoduleUnsupported):
        capture_sync(str(root))


WRITE_STARTED = trio.Event()
MAY_FINISH = trio.Event()
WORKSPACE: list[Path] = []


@tool
async def slow_write(text: str) -> str:
    """Write out.txt in two steps.

    Args:
        text: The final content.
    """
    (WORKSPACE[0] / "out.txt").write_text("half-")
    WRITE_STARTED.set()
    await MAY_FINISH.wait()
    (WORKSPACE[0] / "out.txt").write_text(text)
    return "written"


async def test_capture_waits_until_no_turn_writes_the_workspace(
    tmp_path: Path, git_home: Path
) -> None:
    global WRITE_STARTED, MAY_FINISH
    WRITE_STARTED, MAY_FINISH = trio.Event(), trio.Event()
    root = init(tmp_path / "repo")
    commit(root)
    WORKSPACE[:] = [root]
    model = ScriptedModel([[Call("slow_write", {"text": "complete"})], [Say("done")]])
    agent = Agent.builder().name("helper").instructions("Help.").model(model).tool(slow_write)
    async with Host.open(tmp_path / "host", agents={"helper": agent.build()}) as host:
        session_id = (await host.create_session("helper", root, operation="c")).session.id
        # Another session on the same workspace (as forks and WorkHub workers are): its
        # turn is a writer of the workspace this session captures.
        writer = (await host.create_session("helper", root, operation="w")).session.id
        await host.send(writer, "write it", operation="send")
        with trio.fail_after(30):
            await WRITE_STARTED.wait()
            captured: list[bytes] = []

            async def snapshot() -> None:
                receipt = await host.snapshot_patch(session_id, operation="snap")
                captured.append(joined(await read_all(host, session_id, receipt.patch.id, 4096)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(snapshot)
                await trio.testing.wait_all_tasks_blocked()
                assert captured == []  # the turn still runs its tool
                MAY_FINISH.set()
        assert b"+complete" in captured[0] and b"half-" not in captured[0]


async def test_an_older_store_gains_the_patches_table(tmp_path: Path) -> None:
    path = str(tmp_path / "host.db")
    async with open_sqlite_store(path):
        pass
    db = sqlite3.connect(path)
    db.execute("DROP TABLE patches")
    db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.commit()
    db.close()
    async with open_sqlite_store(path):
        pass
    db = sqlite3.connect(path)
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
        str(SCHEMA_VERSION),
    )
    assert db.execute("SELECT count(*) FROM patches").fetchone() == (0,)
    db.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=edits, second=edits)
def test_random_edits_round_trip_through_git_apply(first: list[Any], second: list[Any]) -> None:
    # A link to its own name, later replaced by a directory: git apply cannot take git's
    # own diff of that (it follows the link and fails with ELOOP), so the oracle cannot
    # judge it (checked by hand: git fails on its own diff of that tree the same way).
    assume(("link", "a.txt", b"a.txt") not in first + second)
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        home = Path(scratch) / "home"
        home.mkdir()
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        root = init(Path(scratch) / "repo")
        for op in first:
            edit(root, *op)
        commit(root)
        for op in second:
            edit(root, *op)
        captured = capture_sync(str(root))
        clone = Path(scratch) / "clone"
        git(scratch, "clone", "-q", str(root), str(clone))
        if captured.data:
            git(clone, "apply", "--index", "-", input=captured.data)
        assert tree(clone) == {path: found for path, found in tree(root).items() if path != b".git"}


async def test_the_hosts_own_state_inside_the_workspace_is_never_work(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    commit(root)
    write(root, "b.txt", "b\n")
    async with Host.open(root / "state" / "host", agents={"helper": helper()}) as host:
        session_id = (await host.create_session("helper", root, operation="c")).session.id
        found = await host.git_status(session_id)
        assert found is not None
        assert [base64.b64decode(e.path) for e in found.untracked] == [b"b.txt"]
        # git itself sees the store (the Host never hides anything else).
        assert b"state/host/host.db" in git(root, "status", "--porcelain", "-uall")
        diff = await host.git_diff(session_id, "untracked", b"state/host/host.db")
        assert diff is not None and diff.kind == "unchanged"
        receipt = await host.snapshot_patch(session_id, operation="snap")
        data = joined(await read_all(host, session_id, receipt.patch.id, 1 << 18))
        assert receipt.patch.files == 1 and b"host.db" not in data
