"""emelex.tools._drain: every byte once, in order, and cancellable under a flood."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import trio
import trio.testing

from emelex.tools._drain import CHECKPOINT_BYTES, READ_SIZE, drain

# 3 MB of varied bytes, written in pieces of many sizes so reads split them anywhere.
PRODUCER = (
    "import sys, hashlib\n"
    "out = sys.stdout.buffer\n"
    "for i in range(3000):\n"
    "    out.write(hashlib.sha256(str(i).encode()).digest() * (i % 61 + 1))\n"
    "out.flush()\n"
)


def _expected() -> bytes:
    return b"".join(hashlib.sha256(str(i).encode()).digest() * (i % 61 + 1) for i in range(3000))


async def test_drain_of_a_pipe_delivers_every_byte_in_order() -> None:
    received = bytearray()
    pieces: list[int] = []

    def sink(view: memoryview) -> None:
        pieces.append(len(view))
        received.extend(view)  # the view is reused after the call: copy

    with trio.fail_after(30):
        process = await trio.lowlevel.open_process(
            [sys.executable, "-c", PRODUCER], stdout=subprocess.PIPE
        )
        assert process.stdout is not None
        await drain(process.stdout, sink)
        await process.wait()
        await process.stdout.aclose()
    assert bytes(received) == _expected()
    assert max(pieces) <= READ_SIZE


async def test_a_flood_is_cancellable_and_other_tasks_keep_running() -> None:
    total = 0
    ticks = 0

    def sink(view: memoryview) -> None:
        nonlocal total
        total += len(view)

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.sleep(0.01)

    with trio.fail_after(30):
        process = await trio.lowlevel.open_process(["cat", "/dev/zero"], stdout=subprocess.PIPE)
        assert process.stdout is not None
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ticker)
                with trio.move_on_after(0.5) as scope:
                    await drain(process.stdout, sink)
                nursery.cancel_scope.cancel()
        finally:
            process.kill()
            await process.wait()
            await process.stdout.aclose()
    assert scope.cancelled_caught  # the flood never ends: only the cancellation stops it
    assert total > CHECKPOINT_BYTES  # it did read, past several checkpoints
    assert ticks >= 2  # and the other task ran meanwhile


async def test_a_stream_without_a_descriptor_is_drained_too() -> None:
    send, receive = trio.testing.memory_stream_one_way_pair()
    received = bytearray()

    async def produce() -> None:
        for index in range(50):
            await send.send_all(bytes([index]) * 1000)
        await send.aclose()

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            await drain(receive, received.extend)
    assert bytes(received) == b"".join(bytes([index]) * 1000 for index in range(50))
