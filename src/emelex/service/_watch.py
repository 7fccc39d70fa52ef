"""Watch subscriptions: bounded per-watcher buffers that never block the Host.

The Host pushes each committed change to every subscriber without waiting. A subscriber
whose buffer is full is dropped: its stream ends with a ``lagged`` :class:`WatchEnded`
naming the last position it actually received, so a new watch from there sees no gap
and no duplicate.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final

import trio

from emelex.contracts import (
    DraftCleared,
    HistoryRow,
    InteractionsChanged,
    Position,
    QueueChanged,
    RowsPublished,
    WatchEnded,
    WatchEndReason,
    WatchUpdate,
    arguments_text,
)
from emelex.service._drafts import Draft, DraftMark

#: Updates one watcher may have waiting before it is dropped as lagged.
DEFAULT_WATCH_BUFFER: Final = 256
#: Text (in code points) of the rows one watcher may have waiting before it is dropped
#: as lagged; one update larger than this still reaches a watcher that waits for nothing.
DEFAULT_WATCH_BYTES: Final = 64 * 1024 * 1024
#: Rows updates at least this heavy are weighed against the budget; lighter ones are
#: bounded by the count alone (it keeps the fan-out of small rows to a flag test).
HEAVY_UPDATE: Final = 64 * 1024
#: Updates that are whole snapshots: a newer one replaces a waiting one.
_SNAPSHOTS: Final = frozenset({QueueChanged, InteractionsChanged})


#: A catch-up page: the cursor it starts after and the fence it reads under.
PageKey = tuple[Position | None, int]


def _after(position: Position, cursor: Position | None) -> bool:
    if cursor is None:
        return True
    return (position.source_sequence, position.item_index) > (
        cursor.source_sequence,
        cursor.item_index,
    )


def rows_weight(rows: tuple[HistoryRow, ...]) -> int:
    """About how much the rows hold: the code points of their texts and of their tool
    calls' arguments (as the wire writes them)."""
    weight = 0
    for row in rows:
        weight += len(row.body) + len(row.thinking or "")
        for call in row.tool_calls:
            weight += len(call.id) + len(call.name) + len(arguments_text(call.arguments))
    return weight


class Subscriber:
    """One watcher's bounded buffer, in updates (``capacity``) and in the weight of the
    rows waiting (``max_bytes``). The Host calls :meth:`offer` (never blocks); the
    watcher awaits :meth:`receive`."""

    def __init__(
        self,
        after: Position | None,
        capacity: int,
        *,
        live: bool = False,
        max_bytes: int = DEFAULT_WATCH_BYTES,
    ) -> None:
        if capacity < 1:
            raise ValueError("a watch buffer holds at least one update")
        if max_bytes < 1:
            raise ValueError("a watch buffer holds at least one byte")
        self.capacity = capacity
        self.max_bytes = max_bytes
        #: The heavy updates waiting (id -> weight) and their total.
        self._heavy: dict[int, int] = {}
        self._heavy_weight = 0
        #: Rows at or before this position were delivered (or are skipped as duplicates).
        self.delivered = after
        self._buffer: deque[WatchUpdate | DraftMark] = deque()
        #: A live watcher also takes drafts (see _drafts): at most one mark per draft
        #: waits in the buffer, and marks do not count against ``capacity``.
        self.live = live
        self._marks: dict[Draft, DraftMark] = {}
        self._queued_marks = 0
        # The watcher's task while it waits: one commit wakes every watcher, so the
        # Host reschedules it directly (no Event and parking lot per wake).
        self._waiting: trio.lowlevel.Task | None = None
        self._end: WatchEndReason | None = None
        self._end_sent = False

    @property
    def ended(self) -> bool:
        return self._end is not None

    def offer(self, update: WatchUpdate, weight: int = 0) -> None:
        """Buffer ``update`` (shared, immutable: every subscriber gets the same object)
        and wake the waiting receiver. ``weight``: the rows' :func:`rows_weight`, for
        the byte budget. Runs once per subscriber per commit: kept to a few attribute
        reads in the common case of an idle watcher."""
        if self._end is not None:
            return
        if weight >= HEAVY_UPDATE and not self._weigh(update, weight):
            return
        buffer = self._buffer
        if buffer and type(update) in _SNAPSHOTS:
            # Snapshots supersede each other: keep only the newest of a kind waiting.
            for index, waiting in enumerate(buffer):
                if type(waiting) is type(update):
                    del buffer[index]
                    break
        if len(buffer) - self._queued_marks >= self.capacity:
            if type(update) is DraftCleared:
                return  # a lagging watcher loses drafts, never rows
            self.end("lagged")
            return
        buffer.append(update)
        task = self._waiting
        if task is not None:
            self._waiting = None
            trio.lowlevel.reschedule(task)

    def _weigh(self, update: WatchUpdate, weight: int) -> bool:
        """Count a heavy update against the budget; False (and ended lagged) when it
        would overflow while others still wait."""
        if self._buffer and self._heavy_weight + weight > self.max_bytes:
            self.end("lagged")
            return False
        self._heavy[id(update)] = weight
        self._heavy_weight += weight
        return True

    def offer_draft(self, draft: Draft) -> None:
        """``draft`` grew: queue this watcher's mark unless one is already waiting."""
        if not self.live or self._end is not None:
            return
        mark = self._marks.get(draft)
        if mark is None:
            mark = self._marks[draft] = DraftMark(draft)
        if not mark.queued:
            self._queue_mark(mark)

    def drafts_cleared(self, drafts: list[Draft], update: DraftCleared) -> None:
        """``drafts`` were dropped (committed rows supersede them, or they failed)."""
        if not self.live:
            return
        for draft in drafts:
            self._marks.pop(draft, None)
        self.offer(update)

    def _queue_mark(self, mark: DraftMark, *, first: bool = False) -> None:
        mark.queued = True
        self._queued_marks += 1
        if first:
            self._buffer.appendleft(mark)
        else:
            self._buffer.append(mark)
            self._wake()

    def end(self, reason: WatchEndReason) -> None:
        if self._end is None:
            self._end = reason
            self._buffer.clear()
            self._marks.clear()
            self._queued_marks = 0
            self._heavy.clear()
            self._heavy_weight = 0
            self._wake()

    def _wake(self) -> None:
        task, self._waiting = self._waiting, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    def _abort(self, _: object) -> trio.lowlevel.Abort:
        self._waiting = None
        return trio.lowlevel.Abort.SUCCEEDED

    def fresh_rows(self, update: RowsPublished) -> RowsPublished | None:
        """``update`` without the rows already delivered (catch-up and live pushes
        overlap), and the cursor moved past it; None when nothing is new. A live update
        that is all new is returned as it is: every watcher shares the one object."""
        rows = update.rows
        if not rows:
            return None
        if not _after(rows[0].position, self.delivered):
            rows = tuple(r for r in rows if _after(r.position, self.delivered))
            if not rows:
                return None
            update = RowsPublished(through=update.through, rows=rows, next_after=rows[-1].position)
        self.delivered = rows[-1].position
        if len(rows) == len(update.rows) and update.next_after == rows[-1].position:
            # Nothing to drop (the live case): the very object every watcher is offered,
            # so the transport finds its encoding by identity.
            return update
        return RowsPublished(through=update.through, rows=rows, next_after=rows[-1].position)

    async def receive(self) -> WatchUpdate | None:
        """The next update, waiting for one; the subscription's last update is a
        :class:`WatchEnded`, and None follows it. Raises ``trio.Cancelled`` when
        cancelled; yields to the scheduler only while it waits."""
        checked = False
        while True:
            if self._buffer:
                if not checked:
                    # A buffered update is returned without yielding (as a checkpoint
                    # would not, for 1,000 watchers woken by one commit), but a
                    # cancellation still lands, before the update is taken. After a
                    # wait, the wait was the checkpoint.
                    await trio.lowlevel.checkpoint_if_cancelled()
                    checked = True
                found = self._pop()
                if found is None:
                    continue
                return found
            if self._end is not None:
                if self._end_sent:
                    await trio.lowlevel.checkpoint()
                    return None
                self._end_sent = True
                await trio.lowlevel.checkpoint()
                return WatchEnded(reason=self._end, resume_after=self.delivered)
            if self._waiting is not None:
                raise trio.BusyResourceError("another task is already receiving from this watch")
            self._waiting = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort)
            checked = True

    def take_nowait(self, most: int) -> list[WatchUpdate]:
        """Up to ``most`` updates that :meth:`receive` would return now without waiting
        (the subscription's ``WatchEnded`` among them once it ended); never blocks, never
        yields. A sender that woke for one update takes the rest of a burst with it."""
        taken: list[WatchUpdate] = []
        while len(taken) < most:
            if self._buffer:
                found = self._pop()
                if found is not None:
                    taken.append(found)
                continue
            if self._end is not None and not self._end_sent:
                self._end_sent = True
                taken.append(WatchEnded(reason=self._end, resume_after=self.delivered))
            break
        return taken

    def _pop(self) -> WatchUpdate | None:
        """The next buffered update as the watcher gets it (a draft's next piece, rows
        not yet delivered), or None when the buffered item came to nothing."""
        update = self._buffer.popleft()
        if isinstance(update, DraftMark):
            self._queued_marks -= 1
            update.queued = False
            draft = update.take()
            if draft is None:
                return None
            if update.behind:  # the rest of a long draft goes next
                self._queue_mark(update, first=True)
            return draft
        if type(update) is RowsPublished:
            if self._heavy:
                self._heavy_weight -= self._heavy.pop(id(update), 0)
            return self.fresh_rows(update)
        return update


class Page:
    """One catch-up page as every watcher gets it: ``update`` (the very object all of
    them are handed) and ``next_after`` (None: the last page under the fence)."""

    __slots__ = ("__weakref__", "next_after", "update")

    def __init__(self, update: RowsPublished, next_after: Position | None) -> None:
        self.update = update
        self.next_after = next_after


class SharedPages:
    """Catch-up pages of one session, shared by the watchers that want one at once.

    A page is kept only while a watcher holds it (weakly referenced), and read once
    however many watchers ask for it together: the others wait for the first reader.
    If that read fails or is cancelled, a waiting watcher reads the page itself.
    """

    def __init__(self) -> None:
        self._pages: weakref.WeakValueDictionary[PageKey, Page] = weakref.WeakValueDictionary()
        self._loading: dict[PageKey, trio.Event] = {}

    def __len__(self) -> int:
        return len(self._pages)

    async def get(self, key: PageKey, read: Callable[[], Awaitable[Page]]) -> Page:
        """The page under ``key``, read by ``read()`` unless a watcher holds it or is
        reading it. Always checkpoints; raises what ``read`` raises; cancelled while
        waiting for another reader, it leaves that read running for the others."""
        while True:
            page = self._pages.get(key)
            if page is not None:
                await trio.lowlevel.checkpoint()
                return page
            loading = self._loading.get(key)
            if loading is None:
                break
            await loading.wait()
        done = self._loading[key] = trio.Event()
        try:
            page = await read()
            self._pages[key] = page
        finally:
            del self._loading[key]
            done.set()
        return page


class WatchStream:
    """A watch's updates: the catch-up first (an async generator: it reads the store),
    then the live updates straight from the subscriber's buffer. One commit wakes every
    watcher, so the live part has no generator frame of its own between the buffer
    and the consumer. Ends after the subscription's :class:`WatchEnded`."""

    def __init__(self, catch_up: AsyncGenerator[WatchUpdate, None], subscriber: Subscriber) -> None:
        self._catch_up: AsyncGenerator[WatchUpdate, None] | None = catch_up
        self._subscriber = subscriber

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchUpdate:
        if self._catch_up is not None:
            try:
                return await self._catch_up.__anext__()
            except StopAsyncIteration:
                self._catch_up = None
        update = await self._subscriber.receive()
        if update is None:
            raise StopAsyncIteration
        return update

    def take_ready(self, most: int) -> list[WatchUpdate]:
        """Up to ``most`` live updates waiting now (none while catching up): see
        :meth:`Subscriber.take_nowait`."""
        if self._catch_up is not None:
            return []
        return self._subscriber.take_nowait(most)

    async def aclose(self) -> None:
        """Close the catch-up if it is still running (the subscription itself is
        ended by whoever holds it)."""
        if self._catch_up is not None:
            catch_up, self._catch_up = self._catch_up, None
            await catch_up.aclose()
