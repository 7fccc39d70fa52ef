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


def test_fresh_rows_keeps_the_offered_update_when_nothing_is_dropped() -> None:
    from emelex.contracts import HistoryRow, Position, RowsPublished

    def row(sequence: int) -> HistoryRow:
        return HistoryRow(
            position=Position(source_sequence=sequence, item_index=0),
            turn_id="t-1",  # type: ignore[arg-type]
            role="user",
            body=f"row {sequence}",
            thinking=None,
            tool_calls=(),
            tool_call_id=None,
            tool_name=None,
            internal=False,
        )

    rows = (row(1), row(2))
    live = RowsPublished(through=2, rows=rows, next_after=rows[-1].position)
    subscriber = Subscriber(None, 8)
    assert subscriber.fresh_rows(live) is live
    assert subscriber.delivered == rows[-1].position
    # Rows already delivered are dropped: a new update holding the rest.
    overlapping = RowsPublished(through=3, rows=(rows[1], row(3)), next_after=None)
    fresh = subscriber.fresh_rows(overlapping)
    assert fresh is not None and fresh.rows == (row(3),)
    assert fresh.next_after == row(3).position
    # A caught-up page (no cursor of its own) gets the cursor of its last row.
    page = RowsPublished(through=4, rows=(row(4),), next_after=None)
    fresh = subscriber.fresh_rows(page)
    assert fresh is not None and fresh is not page and fresh.next_after == row(4).position
    assert subscriber.fresh_rows(page) is None
