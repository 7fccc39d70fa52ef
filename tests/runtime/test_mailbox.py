"""Bounded mailboxes: capacity, back-pressure, statistics, closing."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex import LimitExceeded
from emelex.runtime import (
    MAX_MAILBOX_CAPACITY,
    ActorContext,
    Mailbox,
    MailboxClosed,
    MailboxFull,
    open_supervisor,
)


def test_capacity_must_be_explicit_and_bounded() -> None:
    for bad in (0, -1, MAX_MAILBOX_CAPACITY + 1):
        with pytest.raises(ValueError, match="capacity"):
            Mailbox[int](bad)


async def test_put_nowait_raises_typed_error_at_capacity() -> None:
    box = Mailbox[int](2)
    box.put_nowait(1)
    box.put_nowait(2)
    with pytest.raises(MailboxFull) as caught:
        box.put_nowait(3)
    assert isinstance(caught.value, LimitExceeded)
    assert caught.value.maximum == 2
    assert box.statistics().occupancy == 2
    assert await box.get() == 1


async def test_close_drains_then_ends() -> None:
    box = Mailbox[str](4)
    await box.put("a")
    await box.put("b")
    box.close()
    with pytest.raises(MailboxClosed):
        await box.put("c")
    assert [item async for item in box] == ["a", "b"]
    with pytest.raises(MailboxClosed):
        await box.get()
    stats = box.statistics()
    assert (stats.sent, stats.received, stats.closed) == (2, 2, True)


def slow_consumer_run(capacity: int, items: int, consumer_delay: float) -> None:
    samples: list[int] = []

    async def main() -> None:
        async with open_supervisor("mb") as sup, sup.open_actor("turn", "t") as turn:

            async def consumer(ctx: ActorContext) -> None:
                ctx.started()
                async for _item in ctx.mailbox:
                    samples.append(ctx.mailbox.statistics().occupancy)
                    await trio.sleep(consumer_delay)

            handle = await turn.start(consumer, kind="custom", name="consumer", mailbox=capacity)
            mailbox = handle.actor.mailbox
            assert mailbox is not None
            for item in range(items):
                await handle.send(item)
                stats = mailbox.statistics()
                samples.append(stats.occupancy)
                assert stats.occupancy <= capacity
            mailbox.close()
        assert mailbox.statistics().high_water <= capacity
        assert mailbox.statistics().received == items

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert max(samples, default=0) <= capacity
    if items > capacity + 1:
        # The slow consumer really did make the producer wait at the bound.
        assert max(samples) == capacity


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(0, 60), st.sampled_from([0.0, 0.5, 1.0]))
def test_occupancy_never_exceeds_capacity_under_slow_consumer(
    capacity: int, items: int, delay: float
) -> None:
    slow_consumer_run(capacity, items, delay if delay else 0.001)


async def test_put_blocks_at_capacity_until_get(autojump_clock: object) -> None:
    box = Mailbox[int](1)
    await box.put(1)
    with trio.move_on_after(5) as scope:
        await box.put(2)
    assert scope.cancelled_caught  # a cancelled put delivered nothing
    assert box.statistics().occupancy == 1
    assert await box.get() == 1
    assert box.statistics().occupancy == 0
