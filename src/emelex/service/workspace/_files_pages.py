"""Read-ahead for ``list_files``: a client paging through a directory gets the pages
after the first from a few batched reads instead of one worker-thread hop per page.

The first page of a listing (no cursor) is always read fresh, alone. A request that
continues a listing (its cursor is the ``next_after`` of a page just served) and finds
no ready page reads a batch of consecutive pages from one open descriptor of the
directory, four times as many as the listing's previous batch (up to
``READ_AHEAD_PAGES`` and ``READ_AHEAD_BYTES``): a worker-thread hop costs far more than
building a page, above all on a busy machine. The pages after the one returned wait
here, keyed by the cursor that leads to them, for ``PAGE_LIFETIME`` seconds. A
waiting page is exactly the page a single read would have produced at the time of its
batch read: the same directory identity, the same cursor continuity, entries
``lstat``-ed then. Pages are live observations either way; a client told ``changed``
restarts without a cursor, which reads fresh and drops the listing's waiting pages.

The cache belongs to one Host and is used only from its Trio thread (no lock); its
lifetimes follow the Trio clock. Pages wait as plain lists (see ``RawPage``) and become
contract objects when served.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

import attrs
import trio

from emelex.contracts import FILES_PAGE_TARGET_BYTES, FilesPage, WorkspacePath
from emelex.service.workspace._files import NameCache, RawPage, list_pages
from emelex.service.workspace._files_access import FileAuthority

#: Pages one batched read builds at most, and the estimated wire bytes it stops at.
READ_AHEAD_PAGES: Final = 64
#: How much each batched read of a listing grows over its previous one.
READ_AHEAD_GROWTH: Final = 4
READ_AHEAD_BYTES: Final = 4 * FILES_PAGE_TARGET_BYTES
#: Seconds a page read ahead stays servable, counted from its batch read.
PAGE_LIFETIME: Final = 2.0
#: Listings with waiting pages, and their estimated wire bytes in total (LRU).
CACHED_LISTINGS: Final = 16
CACHED_BYTES: Final = 4 * READ_AHEAD_BYTES

_Key = tuple[str, str | None, str, tuple[str, ...]]


@attrs.define
class _Listing:
    expires: float
    batch: int
    cost: int
    pages: dict[str, RawPage]  # by the cursor (``bytes_base64``) that leads to each


def listing_key(authority: FileAuthority, session_id: str, path: WorkspacePath | None) -> _Key:
    """What one listing's pages depend on besides the directory: the session, its
    workspace and hidden paths (the Host's private state is fixed per Host)."""
    where = None if path is None else path.bytes_base64
    return (session_id, where, authority.workspace, authority.hidden.patterns)


class PageCache:
    """Pages read ahead, per listing (bounded in listings, bytes and time)."""

    def __init__(
        self,
        *,
        lifetime: float = PAGE_LIFETIME,
        listings: int = CACHED_LISTINGS,
        limit: int = CACHED_BYTES,
        clock: Callable[[], float] = trio.current_time,
    ) -> None:
        self._listings: OrderedDict[_Key, _Listing] = OrderedDict()
        self._lifetime = lifetime
        self._most = listings
        self._limit = limit
        self._clock = clock
        self._cost = 0
        self.reads = 0  # batched reads made (worker-thread hops), for tests and benchmarks

    def take(self, key: _Key, after: WorkspacePath) -> RawPage | None:
        """The waiting page that ``after`` leads to in this listing, if still fresh."""
        listing = self._listings.get(key)
        if listing is None:
            return None
        if self._clock() >= listing.expires:
            self._drop(key)
            return None
        self._listings.move_to_end(key)
        return listing.pages.get(after.bytes_base64)

    def next_batch(self, key: _Key, after: WorkspacePath | None) -> int:
        """Pages to read for a request that found nothing waiting: one for a fresh
        listing, else ``READ_AHEAD_GROWTH`` times the listing's previous batch (bounded)."""
        if after is None:
            return 1
        listing = self._listings.get(key)
        previous = 1 if listing is None else listing.batch
        return min(READ_AHEAD_PAGES, READ_AHEAD_GROWTH * previous)

    def keep(self, key: _Key, pages: list[RawPage], batch: int) -> None:
        """Replace the listing's waiting pages with those after ``pages[0]``."""
        self._drop(key)
        waiting = {
            before.next_after: page
            for before, page in itertools.pairwise(pages)
            if before.next_after is not None
        }
        cost = sum(page.cost for page in waiting.values())
        self._listings[key] = _Listing(self._clock() + self._lifetime, batch, cost, waiting)
        self._cost += cost
        while len(self._listings) > self._most or self._cost > self._limit:
            self._drop(next(iter(self._listings)))

    def _drop(self, key: _Key) -> None:
        listing = self._listings.pop(key, None)
        if listing is not None:
            self._cost -= listing.cost

    def __len__(self) -> int:
        return sum(len(listing.pages) for listing in self._listings.values())


async def list_files(
    pages: PageCache,
    names: NameCache,
    authority: FileAuthority,
    session_id: str,
    path: WorkspacePath | None,
    after: WorkspacePath | None,
) -> FilesPage:
    """One page of ``path``'s children after ``after``: a page read ahead when the
    cursor continues a listing, else a (batched) read on a worker thread."""
    key = listing_key(authority, session_id, path)
    if after is not None:
        ready = pages.take(key, after)
        if ready is not None:
            return ready.build(session_id, path)
    batch = pages.next_batch(key, after)
    found = await trio.to_thread.run_sync(
        list_pages, authority, names, path, after, batch, READ_AHEAD_BYTES
    )
    pages.reads += 1
    pages.keep(key, found, batch)
    return found[0].build(session_id, path)


__all__ = [
    "CACHED_BYTES",
    "CACHED_LISTINGS",
    "PAGE_LIFETIME",
    "READ_AHEAD_BYTES",
    "READ_AHEAD_GROWTH",
    "READ_AHEAD_PAGES",
    "PageCache",
    "list_files",
    "listing_key",
]
