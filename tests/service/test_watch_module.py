"""A watch subscriber's wake-up: direct rescheduling, cancellation, one receiver."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from emelex.contracts import InteractionsChanged, WatchEnded
from emelex.service._watch import Subscriber


async def test_a_cancelled_receive_leaves_the_subscriber_usable() -> None:
    subscriber = Subscriber(None, 4)
    with trio.move_on_after(0.01):
        await subscriber.receive()
    update = InteractionsChanged(pending=())
    subscriber.offer(update)
    with trio.fail_after(5):
        assert await subscriber.receive() == update


async def test_an_offer_wakes_the_waiting_receiver_and_end_follows() -> None:
    subscriber = Subscriber(None, 4)
    got: list[object] = []

    async def receive() -> None:
        got.append(await subscriber.receive())
        got.append(await subscriber.receive())
        got.append(await subscriber.receive())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            subscriber.offer(InteractionsChanged(pending=()))
            await trio.testing.wait_all_tasks_blocked()
            subscriber.end("closed")
    assert got[0] == InteractionsChanged(pending=())
    assert got[1] == WatchEnded(reason="closed", resume_after=None)
    assert got[2] is None


async def test_two_tasks_cannot_receive_from_one_subscriber() -> None:
    subscriber = Subscriber(None, 4)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(subscriber.receive)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(trio.BusyResourceError):
                await subscriber.receive()
            subscriber.end("closed")
