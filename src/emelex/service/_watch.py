"""Watch subscriptions: bounded per-watcher buffers that never block the Host.

The Host pushes each committed change to every subscriber without waiting. A subscriber
whose buffer is full is dropped: its stream ends with a ``lagged`` :class:`WatchEnded`
naming the last position it actually received, so a new watch from there sees no gap
and no duplicate.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import trio

from emelex.contracts import (
    InteractionsChanged,
    Position,
    QueueChanged,
    RowsPublished,
    WatchEnded,
    WatchEndReason,
    WatchUpdate,
)

#: Updates one watcher may have waiting before it is dropped as lagged.
DEFAULT_WATCH_BUFFER: Final = 256


def _after(position: Position, cursor: Position | None) -> bool:
    if cursor is None:
        return True
    return (position.source_sequence, position.item_index) > (
        cursor.source_sequence,
        cursor.item_index,
    )


class Subscriber:
    """One watcher's bounded buffer. The Host calls :meth:`offer` (never blocks); the
    watcher awaits :meth:`receive`."""

    def __init__(self, after: Position | None, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a watch buffer holds at least one update")
        self.capacity = capacity
        #: Rows at or before this position were delivered (or are skipped as duplicates).
        self.delivered = after
        self._buffer: deque[WatchUpdate] = deque()
        # The watcher's task while it waits: one commit wakes every watcher, so the
        # Host reschedules it directly (no Event and parking lot per wake).
        self._waiting: trio.lowlevel.Task | None = None
        self._end: WatchEndReason | None = None
        self._end_sent = False

    @property
    def ended(self) -> bool:
        return self._end is not None

    def offer(self, update: WatchUpdate) -> None:
        if self._end is not None:
            return
        if isinstance(update, QueueChanged | InteractionsChanged):
            # Snapshots supersede each other: keep only the newest of a kind waiting.
            for index, waiting in enumerate(self._buffer):
                if type(waiting) is type(update):
                    del self._buffer[index]
                    break
        if len(self._buffer) >= self.capacity:
            self.end("lagged")
            return
        self._buffer.append(update)
        self._wake()

    def end(self, reason: WatchEndReason) -> None:
        if self._end is None:
            self._end = reason
            self._buffer.clear()
            self._wake()

    def _wake(self) -> None:
        task, self._waiting = self._waiting, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _wait(self) -> None:
        if self._waiting is not None:
            raise trio.BusyResourceError("another task is already receiving from this watch")
        self._waiting = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiting = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def fresh_rows(self, update: RowsPublished) -> RowsPublished | None:
        """``update`` without the rows already delivered (catch-up and live pushes
        overlap), and the cursor moved past it; None when nothing is new."""
        rows = tuple(r for r in update.rows if _after(r.position, self.delivered))
        if not rows:
            return None
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
        while True:
            if self._buffer:
                update = self._buffer.popleft()
                if isinstance(update, RowsPublished):
                    fresh = self.fresh_rows(update)
                    if fresh is None:
                        continue
                    update = fresh
                # A buffered update is returned without yielding (as a checkpoint would
                # not, for 1,000 watchers woken by one commit): cancellation still lands.
                await trio.lowlevel.checkpoint_if_cancelled()
                return update
            if self._end is not None:
                if self._end_sent:
                    await trio.lowlevel.checkpoint()
                    return None
                self._end_sent = True
                await trio.lowlevel.checkpoint()
                return WatchEnded(reason=self._end, resume_after=self.delivered)
            await self._wait()
