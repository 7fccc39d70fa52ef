"""The batched sender of a subscription (``_batching``): order, batches, backpressure."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest
import trio
import trio.testing

from emelex.contracts import WatchEnded
from emelex.service.transport._batching import BACKLOG, MOST_PER_FRAME, send_batched

ENDED = WatchEnded(reason="closed", resume_after=None)


class Recorder:
    """A socket whose sends block until the test lets them through."""

    def __init__(self, *, gated: bool) -> None:
        self.frames: list[list[Any]] = []
        self.ends: list[WatchEnded | None] = []
        self.gate = trio.Event()
        if not gated:
            self.gate.set()

    async def send_frame(self, updates: list[Any]) -> None:
        self.frames.append(list(updates))
        await self.gate.wait()

    async def send_end(self, end: WatchEnded | None) -> None:
        self.ends.append(end)


async def _counted(items: list[Any], pulled: list[Any]) -> AsyncGenerator[Any, None]:
    for item in items:
        pulled.append(item)
        yield item
        await trio.lowlevel.checkpoint()


async def test_a_reader_that_keeps_up_gets_one_update_per_frame() -> None:
    sender, receiver = trio.open_memory_channel[Any](0)
    socket = Recorder(gated=False)

    async def updates() -> AsyncIterator[Any]:
        async with receiver:
            async for item in receiver:
                yield item

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_batched, updates(), socket.send_frame, socket.send_end)
            async with sender:
                for n in range(5):
                    await sender.send(n)
                    await trio.testing.wait_all_tasks_blocked()
                    assert socket.frames[-1] == [n]
    assert socket.frames == [[0], [1], [2], [3], [4]]
    assert socket.ends == [None]


async def test_updates_that_wait_share_the_next_frame_in_order() -> None:
    socket = Recorder(gated=True)
    pulled: list[Any] = []
    items = [*range(10), ENDED]
    with trio.fail_after(10):
        async with aclosing(_counted(items, pulled)) as updates, trio.open_nursery() as nursery:
            nursery.start_soon(send_batched, updates, socket.send_frame, socket.send_end)
            await trio.testing.wait_all_tasks_blocked()
            assert len(socket.frames) == 1  # the first frame is stuck in the socket
            socket.gate.set()
    # Everything that waited meanwhile went out in one frame, in order.
    assert len(socket.frames) == 2
    assert [u for frame in socket.frames for u in frame] == list(range(10))
    assert socket.ends == [ENDED]  # the end is its own frame, after every update


async def test_a_stuck_socket_stops_the_pump_at_the_backlog_bound() -> None:
    socket = Recorder(gated=True)
    pulled: list[Any] = []
    items = list(range(BACKLOG + MOST_PER_FRAME * 3))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                send_batched, _counted(items, pulled), socket.send_frame, socket.send_end
            )
            await trio.testing.wait_all_tasks_blocked()
            # The stuck frame's updates, BACKLOG waiting, one more held by the pump: the
            # stream is read no further, so the Host's own buffer fills.
            assert len(pulled) == len(socket.frames[0]) + BACKLOG + 1
            socket.gate.set()
    assert [u for frame in socket.frames for u in frame] == items
    assert max(len(frame) for frame in socket.frames) <= MOST_PER_FRAME
    assert socket.ends == [None]


async def test_a_failing_stream_raises_its_error_after_its_updates_and_sends_no_end() -> None:
    socket = Recorder(gated=False)

    async def failing() -> AsyncIterator[Any]:
        yield 1
        await trio.lowlevel.checkpoint()
        raise RuntimeError("the stream broke")

    with pytest.raises(RuntimeError, match="the stream broke"), trio.fail_after(10):
        await send_batched(failing(), socket.send_frame, socket.send_end)
    assert socket.frames == [[1]]
    assert socket.ends == []


async def test_cancelling_the_sender_while_it_waits_leaves_promptly() -> None:
    socket = Recorder(gated=False)

    async def silent() -> AsyncIterator[Any]:
        await trio.sleep_forever()
        yield None  # pragma: no cover

    with trio.fail_after(10):
        with trio.move_on_after(0) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_batched, silent(), socket.send_frame, socket.send_end)
    assert scope.cancelled_caught
    assert socket.frames == [] and socket.ends == []


class Handing:
    """A stream that hands over what waits (``take_ready``), as the Host's watches do."""

    def __init__(self) -> None:
        self.waiting: list[Any] = []
        self.arrived = trio.Event()
        self.failure: Exception | None = None

    def put(self, *items: Any) -> None:
        self.waiting += items
        self.arrived.set()

    def __aiter__(self) -> Handing:
        return self

    async def __anext__(self) -> Any:
        while not self.waiting:
            if self.failure is not None:
                raise self.failure
            self.arrived = trio.Event()
            await self.arrived.wait()
        return self.waiting.pop(0)

    def take_ready(self, most: int) -> list[Any]:
        taken, self.waiting = self.waiting[:most], self.waiting[most:]
        return taken


async def test_a_stream_that_hands_over_its_burst_is_sent_without_a_pump() -> None:
    stream = Handing()
    socket = Recorder(gated=False)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_batched, stream, socket.send_frame, socket.send_end)
            await trio.testing.wait_all_tasks_blocked()
            assert len(nursery.child_tasks) == 1  # the sender alone: no pump task
            stream.put(0)
            await trio.testing.wait_all_tasks_blocked()
            stream.put(*range(1, MOST_PER_FRAME + 5))
            await trio.testing.wait_all_tasks_blocked()
            stream.put(ENDED)
    assert socket.frames == [
        [0],
        list(range(1, MOST_PER_FRAME + 1)),
        list(range(MOST_PER_FRAME + 1, MOST_PER_FRAME + 5)),
    ]
    assert socket.ends == [ENDED]


async def test_a_handing_stream_that_fails_raises_its_error_after_its_updates() -> None:
    stream = Handing()
    stream.put(1, 2)
    stream.failure = RuntimeError("the stream broke")
    socket = Recorder(gated=False)
    with pytest.raises(RuntimeError, match="the stream broke"), trio.fail_after(10):
        await send_batched(stream, socket.send_frame, socket.send_end)
    assert socket.frames == [[1, 2]]
    assert socket.ends == []
