"""A watch's catch-up: the rows it has not seen, read from the store a page at a time.

Watchers that start together (a page reloaded in many tabs, a fleet of clients after a
Host restart) ask for the same pages. The session's ``SharedPages`` (see _watch) hands
them one object per page while any of them still holds it, so a page is decoded once,
and the transport, which caches encodings by identity, encodes it once: 30 watchers of
a session holding a 30 MB row share one page, one text and one frame, instead of
holding three copies each.

The catch-up reads under one fence, the session's history fence when it starts. Every
row published before the watcher subscribed is at or before it (a Host's newest
published row never runs ahead of the events it applied, see ``last_row``); rows
published after reach the watcher live, from its own buffer. So there is no gap, and
overlaps are dropped by :meth:`Subscriber.fresh_rows`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from functools import partial

from emelex.contracts import (
    HistoryPage,
    InteractionsChanged,
    Position,
    QueueChanged,
    RowsPublished,
    WatchUpdate,
    trusted,
)
from emelex.service._session import HostSession
from emelex.service._state import rows_after
from emelex.service._watch import Page, Subscriber

#: ``read(after, through)``: one history page of the session.
ReadPage = Callable[[Position | None, int], Awaitable[HistoryPage]]


async def _read(read: ReadPage, after: Position | None, through: int) -> Page:
    found = await read(after, through)
    rows = found.rows
    update = trusted(
        RowsPublished,
        kind="rows",
        through=found.through,
        rows=rows,
        # Every row is new to a watcher at ``after``: the update it is handed as it is.
        next_after=rows[-1].position if rows else None,
    )
    return Page(update, found.next_after)


async def catch_up(
    session: HostSession, subscriber: Subscriber, read: ReadPage
) -> AsyncGenerator[WatchUpdate, None]:
    """The queue, the pending interactions, then every row after the subscriber's
    cursor up to the fence of now, a page per step (the next page is read only when
    the watcher asks for more)."""
    yield QueueChanged(queue=session.queue_snapshot())
    yield InteractionsChanged(pending=tuple(session.pending.values()))
    if not rows_after(subscriber.delivered, session.last_row):
        return
    # The history fence, not the revision: a title landing between two watchers'
    # starts moves no row, and must not split the pages they share.
    through = session.history_fence(None)
    after = subscriber.delivered
    while not subscriber.ended:
        page = await session.pages.get((after, through), partial(_read, read, after, through))
        fresh = subscriber.fresh_rows(page.update) if page.update.rows else None
        if fresh is not None:
            yield fresh
        if page.next_after is None:
            return
        after = page.next_after


__all__ = ["ReadPage", "catch_up"]
