"""watch_files: ready, coalesced changed, unavailable and error endings, paced rescans
that converge without notifications, and cleanup on close."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
import trio
import trio.testing
from jsonschema import Draft202012Validator

from emelex.contracts import (
    FilesChanged,
    FilesReady,
    FilesUnavailable,
    FilesWatchEnded,
    FilesWatchFailed,
    WatchFilesUpdate,
    WorkspacePath,
    from_wire,
    schema_for,
    to_wire,
)
from emelex.service import InvalidWorkspacePath, UnknownSession, WorkspacePathNotFound
from emelex.service.workspace._files_access import FileAuthority
from emelex.service.workspace._files_host import session_authority
from emelex.service.workspace._watch_files import Pacing, watch_stream
from tests.service.files_support import files_session, open_fds

UPDATES = Draft202012Validator(schema_for("WatchFilesUpdate"))


def check_wire(update: WatchFilesUpdate) -> WatchFilesUpdate:
    wire = json.loads(json.dumps(to_wire(update)))
    UPDATES.validate(wire)
    assert from_wire(WatchFilesUpdate, wire) == update
    return update


async def next_update(stream: AsyncGenerator[WatchFilesUpdate, None]) -> WatchFilesUpdate:
    with trio.fail_after(10):
        return check_wire(await stream.__anext__())


def authority_for(root: Path) -> FileAuthority:
    return session_authority(str(root), (), root.parent / "no-host-state")


async def test_ready_names_the_listed_directory_and_a_change_follows(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "sub").mkdir()
        path = WorkspacePath.of("sub")
        async with files.host.watch_files(files.session_id, path) as updates:
            stream = updates
            ready = await next_update(stream)  # type: ignore[arg-type]
            assert isinstance(ready, FilesReady)
            page = await files.host.list_files(files.session_id, path)
            assert page.directory_identity == ready.directory_identity and page.entries == ()
            (files.workspace / "sub" / "new.txt").write_text("x")
            assert isinstance(await next_update(stream), FilesChanged)  # type: ignore[arg-type]
            page = await files.host.list_files(files.session_id, path)
            assert [e.path.raw for e in page.entries] == [b"sub/new.txt"]
        with pytest.raises(UnknownSession):
            async with files.host.watch_files("s-nobody"):
                pass


async def test_notifications_coalesce(tmp_path: Path) -> None:
    stream = watch_stream(authority_for(tmp_path), None, lambda: False)
    try:
        assert isinstance(await next_update(stream), FilesReady)
        for index in range(200):
            (tmp_path / f"f{index}").write_text("x")
        assert isinstance(await next_update(stream), FilesChanged)
        # All 200 creations were one notification: nothing else is pending now.
        with trio.move_on_after(0.3) as waited:
            await stream.__anext__()
        assert waited.cancelled_caught
    finally:
        await stream.aclose()


async def test_excluded_entries_never_signal_a_change(tmp_path: Path) -> None:
    scans = 0
    enough = trio.Event()

    def counted(_time: float, _seconds: float) -> None:
        nonlocal scans
        scans += 1
        if scans == 3:
            enough.set()

    (tmp_path / ".git").mkdir()
    (tmp_path / "state").mkdir()
    authority = session_authority(str(tmp_path), ("*.secret",), tmp_path / "state")
    pacing = Pacing(min_pause=0.01, on_scan=counted)
    stream = watch_stream(authority, None, lambda: False, pacing)
    seen: list[WatchFilesUpdate] = []

    async def consume() -> None:
        async for update in stream:
            seen.append(update)

    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                await trio.testing.wait_all_tasks_blocked()
                (tmp_path / ".git" / "index").write_text("x")
                (tmp_path / ".emelex").mkdir()
                (tmp_path / "state" / "host.db").write_text("x")
                (tmp_path / "key.secret").write_text("x")
                await enough.wait()
                nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()
    assert [type(u) for u in seen] == [FilesReady]


async def test_deleting_the_watched_directory_ends_unavailable(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    stream = watch_stream(authority_for(tmp_path), WorkspacePath.of("sub"), lambda: False)
    try:
        assert isinstance(await next_update(stream), FilesReady)
        (tmp_path / "sub").rmdir()
        update = await next_update(stream)
        if isinstance(update, FilesChanged):  # the removal may first be seen as a change
            update = await next_update(stream)
        assert update == FilesUnavailable(reason="deleted")
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
    finally:
        await stream.aclose()


async def test_replacing_the_watched_directory_ends_unavailable(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    stream = watch_stream(authority_for(tmp_path), WorkspacePath.of("sub"), lambda: False)
    try:
        assert isinstance(await next_update(stream), FilesReady)
        (tmp_path / "sub").rename(tmp_path / "old")
        (tmp_path / "sub").mkdir()
        update = await next_update(stream)
        assert update == FilesUnavailable(reason="replaced")
    finally:
        await stream.aclose()


async def test_a_replaced_parent_is_found_by_the_rescan(tmp_path: Path) -> None:
    # Renaming a parent sends the watched directory no notification of its own.
    (tmp_path / "a" / "b").mkdir(parents=True)
    pacing = Pacing(min_pause=0.01)
    stream = watch_stream(authority_for(tmp_path), WorkspacePath.of("a/b"), lambda: False, pacing)
    try:
        assert isinstance(await next_update(stream), FilesReady)
        (tmp_path / "a").rename(tmp_path / "a2")
        (tmp_path / "a" / "b").mkdir(parents=True)
        assert await next_update(stream) == FilesUnavailable(reason="replaced")
    finally:
        await stream.aclose()


async def test_a_removed_workspace_ends_with_an_authority_error(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    stream = watch_stream(authority_for(root), None, lambda: False)
    try:
        assert isinstance(await next_update(stream), FilesReady)
        shutil.rmtree(root)
        update = await next_update(stream)
        assert isinstance(update, FilesWatchFailed) and update.code == "authority"
    finally:
        await stream.aclose()


async def test_problems_before_ready_are_typed_errors(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    os.symlink(".", tmp_path / "loop")
    for raw, error in (
        (b"missing", WorkspacePathNotFound),
        (b"file", InvalidWorkspacePath),
        (b"loop", InvalidWorkspacePath),
    ):
        stream = watch_stream(authority_for(tmp_path), WorkspacePath.of(raw), lambda: False)
        with pytest.raises(error):
            await stream.__anext__()
        await stream.aclose()


async def test_closing_the_host_ends_the_watch(tmp_path: Path) -> None:
    send, receive = trio.open_memory_channel[WatchFilesUpdate](8)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            async with files_session(tmp_path) as files:

                async def consume() -> None:
                    async with send, files.host.watch_files(files.session_id) as updates:
                        async for update in updates:
                            await send.send(update)

                nursery.start_soon(consume)
                assert isinstance(await receive.receive(), FilesReady)
            assert await receive.receive() == FilesWatchEnded(reason="closed")
            with pytest.raises(trio.EndOfChannel):
                await receive.receive()


async def advance(clock: trio.testing.MockClock) -> None:
    """Move virtual time only while the watch sleeps: jump to its next deadline, or let a
    worker thread that is scanning finish (its time is not the watch's pause)."""
    await trio.testing.wait_all_tasks_blocked()
    gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
    if gap < 1_000:  # the watch's own deadline (the test's is far away)
        clock.jump(gap)
    else:
        await trio.to_thread.run_sync(lambda: None)


async def test_lost_notifications_converge_through_paced_rescans(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    scans: list[tuple[float, float]] = []
    pacing = Pacing(on_scan=lambda at, seconds: scans.append((at, seconds)))
    stream = watch_stream(authority_for(tmp_path), None, lambda: False, pacing, notify=False)
    updates: list[tuple[float, int, WatchFilesUpdate]] = []

    async def consume() -> None:
        async for update in stream:
            updates.append((trio.current_time(), len(scans), update))

    try:
        with trio.fail_after(100_000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                while not updates:
                    await advance(mock_clock)
                (tmp_path / "unnoticed").write_text("x")  # no inotify: only a rescan sees it
                while len(updates) < 2:
                    await advance(mock_clock)
                nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()
    ready_at = updates[0][0]
    _, rescans, changed = updates[1]
    assert isinstance(changed, FilesChanged) and rescans == 1  # found by the first rescan
    assert scans[0][0] - ready_at == pytest.approx(1.0)  # one minimum pause after ready


async def test_rescans_are_paced_to_a_tenth_of_the_time(
    tmp_path: Path, mock_clock: trio.testing.MockClock
) -> None:
    for index in range(3000):
        (tmp_path / f"f{index:05d}").write_bytes(b"")
    scans: list[tuple[float, float]] = []
    # Without the one-second floor, the pause is twelve times each scan's duration.
    pacing = Pacing(min_pause=0.0, on_scan=lambda at, seconds: scans.append((at, seconds)))
    stream = watch_stream(authority_for(tmp_path), None, lambda: False, pacing, notify=False)

    async def consume() -> None:
        async for _ in stream:
            pass

    try:
        with trio.fail_after(100_000):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(consume)
                while len(scans) < 6:
                    await advance(mock_clock)
                nursery.cancel_scope.cancel()
    finally:
        await stream.aclose()
    for (start, seconds), (following, _) in itertools.pairwise(scans):
        assert following - start == pytest.approx(12 * seconds)
    assert Pacing().pause(0.05) == 1.0 and Pacing().pause(0.5) == 6.0


async def test_closing_releases_every_descriptor_even_mid_scan(tmp_path: Path) -> None:
    for index in range(20_000):
        (tmp_path / f"{index:05d}").write_bytes(b"")
    before = open_fds()
    for delay in (0.0, 0.001, 0.01, 0.05):
        stream = watch_stream(authority_for(tmp_path), None, lambda: False)
        with trio.move_on_after(delay):
            await stream.__anext__()  # cancelled during the initial scan, or just after
        await stream.aclose()
        assert open_fds() == before
    stream = watch_stream(authority_for(tmp_path), None, lambda: False)
    assert isinstance(await next_update(stream), FilesReady)
    assert open_fds() == before + 1  # the inotify instance
    await stream.aclose()
    assert open_fds() == before
