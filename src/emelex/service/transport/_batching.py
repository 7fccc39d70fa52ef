"""A batched subscription's sender: every update ready when the previous frame went out
shares the next frame.

A pump task reads the Host's update stream into a small bounded backlog; the sender
takes everything waiting at once. A watcher that keeps up gets one update per frame, one
that falls behind gets fewer, larger frames, and a full backlog stops the pump, so the
Host's own bounded buffer for the watcher fills and backpressure reaches it. The
backlog hands over without a memory channel's checkpoint per item: with hundreds of
watchers of one session, each update crosses it hundreds of times.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

import trio

from emelex.contracts import WatchEnded

#: Updates the pump may read ahead of the socket, and the most one frame carries.
BACKLOG: Final = 32
MOST_PER_FRAME: Final = 64


class _Backlog:
    """A bounded hand-over between exactly one pump and one sender. At most one of them
    waits at a time (the pump only when it is full, the sender only when empty)."""

    def __init__(self, capacity: int) -> None:
        self._items: deque[Any] = deque()
        self._capacity = capacity
        self._waiting: trio.lowlevel.Task | None = None
        self._closed = False

    async def put(self, item: Any) -> None:
        while len(self._items) >= self._capacity:
            await self._park()
        self._items.append(item)
        self._wake()

    def close(self) -> None:
        self._closed = True
        self._wake()

    async def take(self, most: int) -> list[Any] | None:
        """Up to ``most`` waiting items (waiting for one); None once closed and empty."""
        while not self._items:
            if self._closed:
                return None
            await self._park()
        count = min(most, len(self._items))
        batch = [self._items.popleft() for _ in range(count)]
        self._wake()
        return batch

    def _wake(self) -> None:
        task, self._waiting = self._waiting, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _park(self) -> None:
        self._waiting = trio.lowlevel.current_task()

        def abort(_: object) -> trio.lowlevel.Abort:
            self._waiting = None
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)


async def send_batched(
    updates: AsyncIterator[Any],
    send_frame: Callable[[list[Any]], Awaitable[None]],
    send_end: Callable[[WatchEnded | None], Awaitable[None]],
) -> None:
    """Send ``updates`` as batches through ``send_frame``, then the end (the stream's
    final ``WatchEnded``, or None when it just stopped) through ``send_end``.

    A stream that can hand over what is waiting without blocking (``take_ready(most)``,
    as the Host's watch streams can) needs no pump: the sender waits for one update and
    takes the rest of the burst with it, one wake-up per frame instead of two. The
    stream's own bounded buffer is then the backlog."""
    take_ready: Callable[[int], list[Any]] | None = getattr(updates, "take_ready", None)
    if take_ready is not None:
        await _send_taking(updates, take_ready, send_frame, send_end)
        return
    backlog = _Backlog(BACKLOG)
    failure: list[Exception] = []

    async def pump() -> None:
        try:
            async for update in updates:
                await backlog.put(update)
                if isinstance(update, WatchEnded):
                    break
        except Exception as exc:  # raised by the sender, unwrapped, after what came before
            failure.append(exc)
        backlog.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(pump)
        while (ready := await backlog.take(MOST_PER_FRAME)) is not None:
            end = ready.pop() if isinstance(ready[-1], WatchEnded) else None
            if ready:
                await send_frame(ready)
            if end is not None:
                await send_end(end)
                return
    if failure:
        raise failure[0]  # outside the nursery: the stream's own error, not a group
    await send_end(None)


async def _send_taking(
    updates: AsyncIterator[Any],
    take_ready: Callable[[int], list[Any]],
    send_frame: Callable[[list[Any]], Awaitable[None]],
    send_end: Callable[[WatchEnded | None], Awaitable[None]],
) -> None:
    while True:
        try:
            first = await updates.__anext__()
        except StopAsyncIteration:
            await send_end(None)
            return
        ready = [first]
        if not isinstance(first, WatchEnded):
            ready += take_ready(MOST_PER_FRAME - 1)
        end = ready.pop() if isinstance(ready[-1], WatchEnded) else None
        if ready:
            await send_frame(ready)
        if end is not None:
            await send_end(end)
            return
