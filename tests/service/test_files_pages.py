"""list_files read-ahead: batched reads, pages served from the Host's cache, their
freshness, identity and bounds."""

from __future__ import annotations

import itertools
import os
from base64 import b64decode
from pathlib import Path

import pytest
import trio

from emelex.contracts import FilesPage, WorkspacePath
from emelex.service import UnknownSession
from emelex.service.workspace._files import NameCache, list_page, list_pages
from emelex.service.workspace._files_access import FileAuthority
from emelex.service.workspace._files_host import session_authority
from emelex.service.workspace._files_pages import (
    PAGE_LIFETIME,
    READ_AHEAD_BYTES,
    READ_AHEAD_PAGES,
    PageCache,
    list_files,
)
from tests.service.files_support import files_session, list_all, names


def populate(directory: Path, count: int, width: int = 6) -> None:
    directory.mkdir(exist_ok=True)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for index in range(count):
            os.close(os.open(f"{index:0{width}d}", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
    finally:
        os.close(fd)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def paginate(
    cache: PageCache, authority: FileAuthority, path: WorkspacePath | None
) -> list[FilesPage]:
    pages: list[FilesPage] = []
    after = None
    while True:
        page = await list_files(cache, NameCache(), authority, "s-1", path, after)
        pages.append(page)
        if page.next_after is None:
            return pages
        after = page.next_after


async def test_a_full_pagination_takes_few_reads_and_equals_single_page_reads(
    tmp_path: Path,
) -> None:
    async with files_session(tmp_path) as files:
        populate(files.workspace / "big", 5_000)
        path = WorkspacePath.of("big")
        with trio.fail_after(120):
            pages, entries = await list_all(files.host, files.session_id, path)
        # 40 pages from batches of 1, 4, 16, then the last 19: four worker hops.
        assert len(pages) == 40 and files.host._workspace.pages.reads == 4
        assert names(entries) == [f"{index:06d}".encode() for index in range(5_000)]
        # Each page is the one a lone read at its cursor gives.
        authority = session_authority(str(files.workspace), (), files.workspace / "host-state")
        after = None
        for page in pages:
            alone = await trio.to_thread.run_sync(
                list_page, authority, NameCache(), files.session_id, path, after
            )
            assert alone == page
            after = page.next_after


async def test_batches_grow_to_the_bound_and_stop_at_the_byte_budget(tmp_path: Path) -> None:
    populate(tmp_path / "d", 128 * 70)
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    path = WorkspacePath.of("d")
    found = list_pages(authority, NameCache(), path, None, 70, 1 << 30)
    assert len(found) == 70 and found[-1].next_after is None
    # Cursor continuity: each page resumes after the last entry of the one before.
    for before, page in itertools.pairwise(found):
        assert before.next_after == before.entries.paths[-1]
        assert b64decode(page.entries.paths[0]) > b64decode(before.entries.paths[-1])
    assert len(list_pages(authority, NameCache(), path, None, 70, 1)) == 1
    budget = found[0].cost * 3
    assert len(list_pages(authority, NameCache(), path, None, 70, budget)) == 3
    cache = PageCache()
    sizes = []
    for _ in range(5):
        sizes.append(cache.next_batch(("k", None, "", ()), path))
        cache.keep(("k", None, "", ()), found[:1], sizes[-1])
    assert sizes == [4, 16, 64, 64, 64] and READ_AHEAD_PAGES == 64
    # A listing without a cursor always starts with one fresh page.
    assert cache.next_batch(("k", None, "", ()), None) == 1
    assert 4 * found[0].cost <= READ_AHEAD_BYTES


async def test_a_first_page_is_always_read_fresh(tmp_path: Path) -> None:
    populate(tmp_path / "d", 300)
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    cache = PageCache()
    path = WorkspacePath.of("d")
    await paginate(cache, authority, path)
    reads = cache.reads
    (tmp_path / "d" / "000000a").write_bytes(b"")
    first = await list_files(cache, NameCache(), authority, "s-1", path, None)
    assert cache.reads == reads + 1
    assert b"000000a" in names(list(first.entries))


async def test_waiting_pages_reflect_their_batch_read_until_they_expire(tmp_path: Path) -> None:
    populate(tmp_path / "d", 128 * 6)
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    clock = Clock()
    cache = PageCache(clock=clock)
    path = WorkspacePath.of("d")
    names_cache = NameCache()
    first = await list_files(cache, names_cache, authority, "s-1", path, None)
    second = await list_files(cache, names_cache, authority, "s-1", path, first.next_after)
    assert cache.reads == 2 and len(cache) == 3  # the second read brought pages 2 to 5
    old = first.directory_identity
    # Replace the directory: the page read ahead is still the old directory's, whole.
    (tmp_path / "d").rename(tmp_path / "old")  # kept: its inode is not reused
    populate(tmp_path / "d", 128 * 6, width=7)
    third = await list_files(cache, names_cache, authority, "s-1", path, second.next_after)
    assert cache.reads == 2
    assert third.directory_identity == old == second.directory_identity
    assert names(list(third.entries))[0] == b"000256"
    # Past its lifetime a waiting page is dropped and the cursor is read fresh.
    first = await list_files(cache, names_cache, authority, "s-1", path, None)
    second = await list_files(cache, names_cache, authority, "s-1", path, first.next_after)
    assert len(cache) == 3 and second.directory_identity != old
    clock.now += PAGE_LIFETIME
    fresh = await list_files(cache, names_cache, authority, "s-1", path, second.next_after)
    assert cache.reads == 5 and len(cache) == 3  # pages 3 to 6, read again
    assert fresh.directory_identity != old
    assert all(len(name) == 7 for name in names(list(fresh.entries)))


async def test_the_cache_is_bounded_in_listings_and_bytes(tmp_path: Path) -> None:
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    for letter in "abc":
        populate(tmp_path / letter, 128 * 8)
    cache = PageCache(listings=2)
    for letter in "abc":
        path = WorkspacePath.of(letter)
        first = await list_files(cache, NameCache(), authority, "s-1", path, None)
        await list_files(cache, NameCache(), authority, "s-1", path, first.next_after)
    assert len(cache._listings) == 2 and len(cache) == 6
    # A limit below one batch's pages keeps nothing waiting: every page is a read.
    cache = PageCache(limit=1)
    pages = await paginate(cache, authority, WorkspacePath.of("a"))
    assert len(pages) == 8 and cache.reads == 8 and len(cache) == 0


async def test_listings_of_other_sessions_and_exclusions_never_share_pages(
    tmp_path: Path,
) -> None:
    populate(tmp_path / "d", 128 * 4)
    (tmp_path / "d" / "000300.env").write_bytes(b"")
    plain = session_authority(str(tmp_path), (), tmp_path / "none")
    hiding = session_authority(str(tmp_path), ("*.env",), tmp_path / "none")
    cache = PageCache()
    path = WorkspacePath.of("d")
    names_cache = NameCache()
    first = await list_files(cache, names_cache, plain, "s-1", path, None)
    await list_files(cache, names_cache, plain, "s-1", path, first.next_after)
    assert len(cache) == 3  # the plain session's pages 3 to 5 wait
    seen = [await list_files(cache, names_cache, hiding, "s-1", path, None)]
    while seen[-1].next_after is not None:
        seen.append(await list_files(cache, names_cache, hiding, "s-1", path, seen[-1].next_after))
    assert b"000300.env" not in names([entry for page in seen for entry in page.entries])
    other = await list_files(cache, names_cache, plain, "s-2", path, first.next_after)
    assert other.session_id == "s-2"


async def test_a_cached_page_still_needs_a_known_session(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        populate(files.workspace / "d", 128 * 4)
        path = WorkspacePath.of("d")
        first = await files.host.list_files(files.session_id, path)
        await files.host.list_files(files.session_id, path, after=first.next_after)
        assert len(files.host._workspace.pages) == 2
        with pytest.raises(UnknownSession):
            await files.host.list_files("s-unknown", path, after=first.next_after)
