"""Draining a subprocess pipe at the speed of ``cat``, into a caller's bounded sink.

Trio's ``FdStream.receive_some`` allocates a fresh buffer for every read and schedules
(a full checkpoint) before each one: draining a fast producer spends most of its time
there, not copying. Here one buffer is allocated per drain and reused (``readinto``),
reads repeat while the pipe has data, and the task checkpoints once per
:data:`CHECKPOINT_BYTES` read (so a flood never starves the other tasks and a
cancellation still lands within about a millisecond of reading) and whenever the pipe
is empty (it then waits for the pipe to become readable).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import trio

READ_SIZE = 256 * 1024
"""Bytes one read may return (a buffer this size is reused: it stays in the CPU cache)."""
CHECKPOINT_BYTES = 4 * 1024 * 1024
"""Bytes read between two checkpoints while the pipe never runs dry."""

Sink = Callable[[memoryview], None]
"""Takes each piece read; the view is only valid during the call (copy what is kept)."""


async def drain(stream: trio.abc.ReceiveStream, sink: Sink) -> None:
    """Read ``stream`` to its end (or until it is closed or broken) into ``sink``."""
    fileno = getattr(stream, "fileno", None)
    fd = fileno() if fileno is not None else -1
    if fd < 0 or os.get_blocking(fd):  # not a non-blocking pipe: the generic path
        await _drain_stream(stream, sink)
        return
    buffer = memoryview(bytearray(READ_SIZE))
    # closefd=False: the stream owns the descriptor. It is non-blocking (FdStream made
    # it so), and readinto returns None when the pipe is empty.
    reader = io.FileIO(fd, "rb", closefd=False)
    unchecked = 0
    try:
        while True:
            try:
                count = reader.readinto(buffer)
            except OSError:
                return  # closed or broken: what receive_some would raise, the end here
            if count is None:
                unchecked = 0
                try:
                    await trio.lowlevel.wait_readable(fd)
                except (trio.ClosedResourceError, trio.BrokenResourceError):
                    return
                continue
            if not count:
                return
            sink(buffer[:count])
            unchecked += count
            if unchecked >= CHECKPOINT_BYTES:
                unchecked = 0
                await trio.lowlevel.checkpoint()
    finally:
        reader.close()  # closes nothing (closefd=False): only the wrapper


async def _drain_stream(stream: trio.abc.ReceiveStream, sink: Sink) -> None:
    while True:
        try:
            chunk = await stream.receive_some(READ_SIZE)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return
        if not chunk:
            return
        sink(memoryview(chunk))
