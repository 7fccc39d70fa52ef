"""Bounded mailboxes: trio memory channels with an explicit capacity and statistics."""

from __future__ import annotations

from typing import Generic, TypeVar

import attrs
import trio

from emelex.runtime._errors import MailboxClosed, MailboxFull

T = TypeVar("T")

#: Largest capacity a mailbox may be given. A mailbox is for back-pressure, not storage.
MAX_MAILBOX_CAPACITY = 65_536


@attrs.frozen
class MailboxStatistics:
    """A point-in-time view of a mailbox."""

    capacity: int
    occupancy: int
    high_water: int
    sent: int
    received: int
    closed: bool


class Mailbox(Generic[T]):
    """A bounded, single-owner queue between actors.

    ``put`` waits (back-pressure) while the mailbox holds ``capacity`` items; ``put_nowait``
    raises :class:`MailboxFull` instead. Occupancy never exceeds the capacity: the only
    storage is a trio memory channel created with exactly that buffer size.

    Cancellation: ``put`` and ``get`` are trio checkpoints; a cancelled ``put`` did not
    deliver its item, a cancelled ``get`` did not consume one.
    """

    __slots__ = ("_capacity", "_high_water", "_receive", "_received", "_send", "_sent")

    def __init__(self, capacity: int) -> None:
        if not 1 <= capacity <= MAX_MAILBOX_CAPACITY:
            raise ValueError(f"mailbox capacity must be within 1..{MAX_MAILBOX_CAPACITY}")
        self._capacity = capacity
        self._send, self._receive = trio.open_memory_channel[T](capacity)
        self._sent = 0
        self._received = 0
        self._high_water = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    def _count_sent(self) -> None:
        self._sent += 1
        # Read the channel's real buffer: counting sent - received would over-report while a
        # receiver sits in its post-receive checkpoint.
        occupancy = self._send.statistics().current_buffer_used
        if occupancy > self._high_water:
            self._high_water = occupancy

    async def put(self, item: T) -> None:
        """Send ``item``, waiting while the mailbox is full. Raises MailboxClosed."""
        try:
            await self._send.send(item)
        except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
            raise MailboxClosed("mailbox is closed") from exc
        self._count_sent()

    def put_nowait(self, item: T) -> None:
        """Send ``item`` without waiting. Raises MailboxFull or MailboxClosed."""
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            raise MailboxFull("mailbox capacity", self._capacity) from None
        except (trio.ClosedResourceError, trio.BrokenResourceError) as exc:
            raise MailboxClosed("mailbox is closed") from exc
        self._count_sent()

    async def get(self) -> T:
        """Receive the next item, waiting while empty. Raises MailboxClosed once drained."""
        try:
            item = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as exc:
            raise MailboxClosed("mailbox is closed and drained") from exc
        self._received += 1
        return item

    def get_nowait(self) -> T:
        """Receive without waiting. Raises trio.WouldBlock when empty, MailboxClosed at end."""
        try:
            item = self._receive.receive_nowait()
        except (trio.EndOfChannel, trio.ClosedResourceError) as exc:
            raise MailboxClosed("mailbox is closed and drained") from exc
        self._received += 1
        return item

    def close(self) -> None:
        """Stop accepting items; receivers drain what is buffered, then see the end."""
        self._send.close()

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except MailboxClosed:
            raise StopAsyncIteration from None

    def statistics(self) -> MailboxStatistics:
        stats = self._send.statistics()
        return MailboxStatistics(
            capacity=self._capacity,
            occupancy=stats.current_buffer_used,
            high_water=self._high_water,
            sent=self._sent,
            received=self._received,
            closed=stats.open_send_channels == 0,
        )
