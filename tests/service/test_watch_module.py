"""A watch subscriber's wake-up (direct rescheduling, cancellation, one receiver), its
budgets in updates and in bytes, and the catch-up pages its watchers share."""

from __future__ import annotations

import gc
from collections.abc import AsyncGenerator

import pytest
import trio
import trio.testing

from emelex.contracts import (
    InteractionsChanged,
    Position,
    RowsPublished,
    WatchEnded,
    WatchUpdate,
)
from emelex.model import ToolCall
from emelex.service._rows import history_row
from emelex.service._watch import (
    HEAVY_UPDATE,
    Page,
    SharedPages,
    Subscriber,
    WatchStream,
    rows_weight,
)


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


def rows_update(*indexes: int) -> RowsPublished:
    rows = tuple(
        history_row(
            position=Position(source_sequence=1, item_index=i),
            turn_id="t",
            role="user",
            body=f"row {i}",
            thinking=None,
            calls=(),
            tool_call_id=None,
            tool_name=None,
            internal=False,
        )
        for i in indexes
    )
    return RowsPublished(through=1, rows=rows, next_after=rows[-1].position)


async def test_every_watcher_gets_the_one_update_object_and_overlaps_are_cut() -> None:
    update = rows_update(0, 1, 2)
    fresh, behind = Subscriber(None, 4), Subscriber(Position(source_sequence=1, item_index=0), 4)
    for subscriber in (fresh, behind):
        subscriber.offer(update)
    with trio.fail_after(5):
        assert await fresh.receive() is update  # shared: no per-watcher copy
        cut = await behind.receive()
    assert isinstance(cut, RowsPublished)
    assert [r.position.item_index for r in cut.rows] == [1, 2]
    assert fresh.delivered == behind.delivered == Position(source_sequence=1, item_index=2)
    fresh.offer(update)  # all delivered already: skipped, nothing to receive
    fresh.end("closed")
    with trio.fail_after(5):
        assert isinstance(await fresh.receive(), WatchEnded)


async def test_a_cancelled_receive_of_a_buffered_update_loses_nothing() -> None:
    subscriber = Subscriber(None, 4)
    update = InteractionsChanged(pending=())
    subscriber.offer(update)
    with trio.CancelScope() as scope:
        scope.cancel()
        await subscriber.receive()
        pytest.fail("a cancelled receive returned")  # pragma: no cover
    with trio.fail_after(5):
        assert await subscriber.receive() is update


async def test_the_stream_follows_the_catch_up_with_live_updates() -> None:
    subscriber = Subscriber(None, 4)
    early = rows_update(0)

    async def catch_up() -> AsyncGenerator[WatchUpdate, None]:
        fresh = subscriber.fresh_rows(early)
        assert fresh is not None
        yield fresh

    stream = WatchStream(catch_up(), subscriber)
    subscriber.offer(rows_update(0, 1))  # overlaps the catch-up: row 0 is not repeated
    subscriber.offer(InteractionsChanged(pending=()))
    with trio.fail_after(5):
        got = [await stream.__anext__() for _ in range(3)]
        subscriber.end("closed")  # drops nothing here: the buffer is empty
        got += [update async for update in stream]
    assert [type(u).__name__ for u in got] == [
        "RowsPublished",
        "RowsPublished",
        "InteractionsChanged",
        "WatchEnded",
    ]
    first, second = got[0], got[1]
    assert isinstance(first, RowsPublished) and isinstance(second, RowsPublished)
    assert [r.position.item_index for r in (*first.rows, *second.rows)] == [0, 1]
    await stream.aclose()


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


async def test_take_ready_hands_over_a_burst_then_the_end_without_waiting() -> None:
    subscriber = Subscriber(None, 8)
    live = InteractionsChanged(pending=())

    async def catch_up() -> AsyncGenerator[WatchUpdate, None]:
        fresh = subscriber.fresh_rows(rows_update(0))
        assert fresh is not None
        yield fresh

    stream = WatchStream(catch_up(), subscriber)
    subscriber.offer(rows_update(0, 1))
    subscriber.offer(rows_update(2))
    subscriber.offer(live)
    assert stream.take_ready(8) == []  # nothing live is handed over during the catch-up
    with trio.fail_after(5):
        assert isinstance(await stream.__anext__(), RowsPublished)  # the catch-up's page
        first = await stream.__anext__()  # the catch-up ended: the live part begins
    assert isinstance(first, RowsPublished)
    assert [r.position.item_index for r in first.rows] == [1]  # row 0 was caught up
    taken = stream.take_ready(1)
    assert len(taken) == 1 and isinstance(taken[0], RowsPublished)
    assert stream.take_ready(8) == [live]
    assert stream.take_ready(8) == []
    subscriber.end("closed")
    end = WatchEnded(reason="closed", resume_after=Position(source_sequence=1, item_index=2))
    assert stream.take_ready(8) == [end]
    assert stream.take_ready(8) == []
    with trio.fail_after(5):
        assert [u async for u in stream] == []  # the end went out once
    await stream.aclose()


def heavy_update(index: int, body_chars: int) -> RowsPublished:
    row = history_row(
        position=Position(source_sequence=1, item_index=index),
        turn_id="t",
        role="assistant",
        body="x" * body_chars,
        thinking="y" * 10,
        calls=(),
        tool_call_id=None,
        tool_name=None,
        internal=False,
    )
    return RowsPublished(through=1, rows=(row,), next_after=row.position)


def test_rows_weight_counts_texts_and_the_wire_text_of_arguments() -> None:
    row = history_row(
        position=Position(source_sequence=1, item_index=0),
        turn_id="t",
        role="assistant",
        body="héllo",
        thinking="hm",
        calls=(ToolCall(id="c1", name="read", arguments={"path": "日本"}),),
        tool_call_id=None,
        tool_name=None,
        internal=False,
    )
    assert rows_weight((row,)) == 5 + 2 + 2 + 4 + len('{"path":"日本"}')


async def test_a_watcher_behind_by_more_than_its_byte_budget_ends_lagged() -> None:
    budget = 3 * HEAVY_UPDATE
    subscriber = Subscriber(None, 100, max_bytes=budget)
    updates = [heavy_update(i, HEAVY_UPDATE - 10) for i in range(4)]
    for update in updates[:3]:  # three of them fit, far below the count of 100
        subscriber.offer(update, rows_weight(update.rows))
    with trio.fail_after(5):
        assert await subscriber.receive() is updates[0]  # taking one frees its weight
    subscriber.offer(updates[3], rows_weight(updates[3].rows))
    assert not subscriber.ended
    subscriber.offer(heavy_update(4, HEAVY_UPDATE), HEAVY_UPDATE + 10)
    assert subscriber.ended
    with trio.fail_after(5):
        end = await subscriber.receive()
    assert end == WatchEnded(reason="lagged", resume_after=updates[0].rows[-1].position)


async def test_one_update_heavier_than_the_budget_reaches_a_watcher_that_keeps_up() -> None:
    subscriber = Subscriber(None, 4, max_bytes=HEAVY_UPDATE)
    light = rows_update(0)
    subscriber.offer(light)  # light rows are bounded by the count alone
    with trio.fail_after(5):
        assert await subscriber.receive() is light
    huge = heavy_update(5, 4 * HEAVY_UPDATE)
    subscriber.offer(huge, rows_weight(huge.rows))
    assert not subscriber.ended
    with trio.fail_after(5):
        assert await subscriber.receive() is huge


def _page(tag: int) -> Page:
    return Page(heavy_update(tag, 1), None)


async def test_watchers_asking_for_one_page_together_share_one_read() -> None:
    pages = SharedPages()
    reads: list[int] = []
    got: list[Page] = []
    release = trio.Event()

    async def read() -> Page:
        reads.append(1)
        await release.wait()  # the others ask meanwhile
        return _page(1)

    async def watcher() -> None:
        got.append(await pages.get((None, 3), read))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            for _ in range(5):
                nursery.start_soon(watcher)
            await trio.testing.wait_all_tasks_blocked()
            release.set()
    assert reads == [1]
    assert all(page is got[0] for page in got)
    assert len(pages) == 1  # while a watcher holds it
    got.clear()
    gc.collect()
    assert len(pages) == 0  # kept only while held


async def test_a_cancelled_or_failed_reader_leaves_the_page_to_the_next_watcher() -> None:
    pages = SharedPages()
    calls: list[str] = []

    async def slow() -> Page:
        calls.append("slow")
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def broken() -> Page:
        calls.append("broken")
        raise ValueError("the store refused")

    async def fine() -> Page:
        calls.append("fine")
        return _page(2)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            cancelled = trio.CancelScope()

            async def first() -> None:
                with cancelled:
                    await pages.get((None, 1), slow)

            nursery.start_soon(first)
            await trio.testing.wait_all_tasks_blocked()
            waiter_got: list[Page] = []

            async def waiter() -> None:
                waiter_got.append(await pages.get((None, 1), fine))

            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            cancelled.cancel()
        with pytest.raises(ValueError, match="refused"):
            await pages.get((None, 9), broken)
        again = await pages.get((None, 9), fine)
    assert calls == ["slow", "fine", "broken", "fine"]
    assert waiter_got[0].update.rows[0].position.item_index == 2
    assert again.next_after is None
