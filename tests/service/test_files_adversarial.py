"""Adversarial workspace files: symlinks and directories swapped in a tight loop during
list, watch and read; FIFOs, devices, hardlinks, growing files, 100,000 entries and
non-UTF-8 names. Zero escapes, zero mixed versions, bounded memory."""

from __future__ import annotations

import os
import stat
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import trio

from emelex.contracts import (
    FilesReady,
    FilesUnavailable,
    ReadFileChanged,
    ReadFileUnsupported,
    WorkspacePath,
)
from emelex.service import (
    FileSnapshot,
    InvalidWorkspacePath,
    WorkspacePathNotFound,
    assemble_file,
)
from emelex.service.workspace._files import NAMES
from emelex.service.workspace._files_host import session_authority
from emelex.service.workspace._read_file import read_stream
from emelex.service.workspace._watch_files import Pacing, watch_stream
from emelex.tools.workspace._linux import RENAME_EXCHANGE, renameat2
from tests.service.files_support import files_session, list_all, names

PASSWD = Path("/etc/passwd").read_bytes()


@contextmanager
def flipping(action: Callable[[], None]) -> Iterator[list[int]]:
    """Run ``action`` in a tight loop on a thread for the duration of the block."""
    stop = threading.Event()
    count = [0]

    def loop() -> None:
        while not stop.is_set():
            action()
            count[0] += 1

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield count
    finally:
        stop.set()
        thread.join()
    assert count[0] > 0  # the race really ran


def write_at(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def exchanger(root: Path, first: str, second: str) -> Callable[[], None]:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)

    def swap() -> None:
        renameat2(fd, first, fd, second, RENAME_EXCHANGE)

    return swap


async def test_listing_a_directory_flipped_with_a_symlink_never_escapes(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "d").mkdir()
        for index in range(20):
            (ws / "d" / f"inside-{index}").write_bytes(b"")
        os.symlink("/etc", ws / "alt")
        listed = refused = 0
        with trio.fail_after(60), flipping(exchanger(ws, "d", "alt")):
            for _ in range(300):
                try:
                    _, entries = await list_all(files.host, files.session_id, WorkspacePath.of("d"))
                except (InvalidWorkspacePath, WorkspacePathNotFound):
                    refused += 1
                    continue
                listed += 1
                assert all(name.startswith(b"inside-") for name in names(entries))
        assert listed + refused == 300


async def test_pages_of_a_directory_replaced_meanwhile_never_mix(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "d").mkdir()
        (ws / "other").mkdir()
        for index in range(300):
            (ws / "d" / f"a{index:03d}").write_bytes(b"")
            (ws / "other" / f"b{index:03d}").write_bytes(b"")
        identities = {
            f"{os.stat(ws / 'd').st_dev}:{os.stat(ws / 'd').st_ino}": b"a",
            f"{os.stat(ws / 'other').st_dev}:{os.stat(ws / 'other').st_ino}": b"b",
        }
        path = WorkspacePath.of("d")
        with trio.fail_after(60), flipping(exchanger(ws, "d", "other")):
            for _ in range(100):
                after = None
                while True:
                    page = await files.host.list_files(files.session_id, path, after=after)
                    letter = identities[page.directory_identity]
                    # Each page lists the one directory it opened, whatever the path means now.
                    assert all(e.path.name.startswith(letter) for e in page.entries)
                    if page.next_after is None:
                        break
                    after = page.next_after


async def test_reading_a_file_flipped_with_a_symlink_never_escapes(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "f").write_bytes(b"inside")
        os.symlink("/etc/passwd", ws / "alt")
        outcomes: dict[str, int] = {}
        with trio.fail_after(60), flipping(exchanger(ws, "f", "alt")):
            for _ in range(300):
                async with files.host.read_file(files.session_id, WorkspacePath.of("f")) as ups:
                    result = await assemble_file(ups)
                if isinstance(result, FileSnapshot):
                    assert result.data == b"inside"
                else:
                    assert result in (
                        ReadFileUnsupported(file_kind="symlink"),
                        ReadFileChanged(version=None),
                    )
                outcomes[type(result).__name__] = outcomes.get(type(result).__name__, 0) + 1
        assert sum(outcomes.values()) == 300


async def test_a_path_replaced_during_reads_never_mixes_versions(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        first, second = b"A" * 300_000, b"B" * 200_000
        (ws / "f").write_bytes(first)
        (ws / "g").write_bytes(second)
        (ws / "p").mkdir()
        (ws / "q").mkdir()
        (ws / "p" / "x").write_bytes(first)
        (ws / "q" / "x").write_bytes(second)
        seen: set[bytes] = set()
        with trio.fail_after(120):
            for swap, raw in ((exchanger(ws, "f", "g"), b"f"), (exchanger(ws, "p", "q"), b"p/x")):
                with flipping(swap):
                    for _ in range(60):
                        async with files.host.read_file(
                            files.session_id, WorkspacePath.of(raw)
                        ) as updates:
                            result = await assemble_file(updates)
                        if isinstance(result, FileSnapshot):
                            assert result.data in (first, second)  # verified by the assembler
                            seen.add(result.data[:1])
                        else:
                            assert result == ReadFileChanged(version=None)
        assert seen  # at least one complete capture got through


async def test_a_file_growing_during_reads_is_a_consistent_prefix_or_changed(
    tmp_path: Path,
) -> None:
    async with files_session(tmp_path) as files:
        target = files.workspace / "grow"
        target.write_bytes(b"")
        block = bytes(range(256)) * 16  # 4 KiB
        handle = target.open("ab")

        def append() -> None:
            if handle.tell() < 16 * 1024 * 1024:
                handle.write(block)
                handle.flush()

        try:
            with trio.fail_after(120), flipping(append):
                for _ in range(40):
                    async with files.host.read_file(
                        files.session_id, WorkspacePath.of("grow")
                    ) as updates:
                        result = await assemble_file(updates)
                    if isinstance(result, FileSnapshot):
                        data = result.data
                        # Appends are whole blocks except possibly the one in flight.
                        full = len(data) // len(block) * len(block)
                        assert data[:full] == block * (full // len(block))
                        assert data[full:] == block[: len(data) - full]
                    else:
                        assert result == ReadFileChanged(version=None) or (
                            type(result).__name__ == "ReadFileBinary"  # NUL bytes: not text
                        )
        finally:
            handle.close()


async def test_fifos_and_devices_swapped_in_never_block_a_read(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "f").write_bytes(b"regular")
        os.mkfifo(ws / "fifo")
        os.symlink("/dev/null", ws / "null")
        if os.geteuid() == 0:
            os.mknod(ws / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        kinds = {"fifo", "symlink", "charDevice"}
        with trio.fail_after(60):
            for other in ("fifo", "null", "zero") if os.geteuid() == 0 else ("fifo", "null"):
                with flipping(exchanger(ws, "f", other)):
                    for _ in range(100):
                        async with files.host.read_file(
                            files.session_id, WorkspacePath.of("f")
                        ) as updates:
                            result = await assemble_file(updates)
                        if isinstance(result, FileSnapshot):
                            assert result.data == b"regular"
                        elif isinstance(result, ReadFileUnsupported):
                            assert result.file_kind in kinds
                        else:
                            assert result == ReadFileChanged(version=None)
                if (ws / other).is_file():  # leave the regular file at "f"
                    exchanger(ws, "f", other)()


async def test_watching_a_directory_replaced_in_a_loop_ends_unavailable(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "e").mkdir()
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    stream = watch_stream(authority, WorkspacePath.of("d"), lambda: False, Pacing(min_pause=0.01))
    try:
        with trio.fail_after(30):
            assert isinstance(await stream.__anext__(), FilesReady)
            with flipping(exchanger(tmp_path, "d", "e")):
                update = await stream.__anext__()
                while update.kind == "changed":
                    update = await stream.__anext__()
        assert isinstance(update, FilesUnavailable)
    finally:
        await stream.aclose()


async def test_hardlinks_are_ordinary_files_of_the_workspace(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "a").write_text("linked")
        os.link(ws / "a", ws / "b")
        page = await files.host.list_files(files.session_id)
        assert {(e.path.raw, e.kind) for e in page.entries} == {(b"a", "file"), (b"b", "file")}
        async with files.host.read_file(files.session_id, WorkspacePath.of("b")) as updates:
            result = await assemble_file(updates)
        assert isinstance(result, FileSnapshot) and result.text == "linked"


async def test_non_utf8_names_travel_as_exact_bytes_everywhere(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = os.fsencode(files.workspace)
        directory = b"\xff\xfe-dir"
        os.mkdir(os.path.join(ws, directory))
        write_at(os.path.join(ws, directory, b"caf\xe9.txt"), "café".encode())
        path = WorkspacePath.of(directory)
        async with files.host.watch_files(files.session_id, path) as updates:
            assert isinstance(await updates.__anext__(), FilesReady)
            page = await files.host.list_files(files.session_id, path)
            assert [e.path.raw for e in page.entries] == [directory + b"/caf\xe9.txt"]
            async with files.host.read_file(files.session_id, page.entries[0].path) as reading:
                result = await assemble_file(reading)
            assert isinstance(result, FileSnapshot) and result.text == "café"
            write_at(os.path.join(ws, directory, b"\x80"), b"")
            with trio.fail_after(10):
                assert (await updates.__anext__()).kind == "changed"


async def test_a_100000_entry_directory_pages_completely_in_bounded_memory(
    tmp_path: Path,
) -> None:
    async with files_session(tmp_path) as files:
        big = files.workspace / "big"
        big.mkdir()
        fd = os.open(big, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for index in range(100_000):
                os.close(os.open(f"{index:06d}", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        finally:
            os.close(fd)
        path = WorkspacePath.of("big")
        with trio.fail_after(300):
            pages, entries = await list_all(files.host, files.session_id, path)
        assert len(entries) == 100_000 and len(pages) == 782
        found = names(entries)
        assert found == sorted(set(found))
        # The Host's own work on a cold cache (read and sort every name, build a page,
        # fingerprint every entry for a watch) stays within a bound of its own.
        NAMES._entries.clear()
        tracemalloc.start()
        try:
            page = await files.host.list_files(files.session_id, path)
            authority = session_authority(str(files.workspace), (), files.workspace / "h")
            stream = watch_stream(authority, path, lambda: False)
            assert isinstance(await stream.__anext__(), FilesReady)
            await stream.aclose()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(page.entries) == 128
        assert peak < 24 * 1024 * 1024
        async with files.host.watch_files(files.session_id, path) as updates:
            with trio.fail_after(60):
                assert isinstance(await updates.__anext__(), FilesReady)
                (big / "new").write_bytes(b"")
                assert (await updates.__anext__()).kind == "changed"


@pytest.mark.parametrize("size", [32 * 1024 * 1024])
async def test_reading_a_large_file_keeps_one_buffer(tmp_path: Path, size: int) -> None:
    (tmp_path / "large").write_bytes(b"x" * size)
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    tracemalloc.start()
    try:
        chunks = 0
        async for update in read_stream(authority, WorkspacePath.of("large")):
            chunks += update.kind == "chunk"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert chunks == size // (32 * 1024)
    # One capture buffer plus one batch of encoded chunks (and the reread check).
    assert peak < size + 8 * 1024 * 1024
