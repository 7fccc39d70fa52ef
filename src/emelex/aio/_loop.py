"""One asyncio event loop on top of Trio (through trio-asyncio), opened per engine or
session by the application that owns it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio_asyncio

from emelex.aio._errors import AsyncioLoopMissing, AsyncioTaskCancelled


def current_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The asyncio loop that asyncio-flavoured tools of this task would run on, or None.

    It is the loop of the innermost :func:`open_asyncio_loop` around the task (Trio
    tasks inherit it from the task that started them)."""
    loop: asyncio.AbstractEventLoop | None = trio_asyncio.current_loop.get()
    return loop


def require_asyncio_loop(what: str) -> Any:
    """The open loop (a ``trio_asyncio.TrioEventLoop``); AsyncioLoopMissing if none."""
    loop = trio_asyncio.current_loop.get()
    if loop is None or loop.is_closed():
        raise AsyncioLoopMissing(
            f"{what} is an asyncio function and no asyncio loop is open here; wrap the "
            "engine or session in `async with emelex.aio.open_asyncio_loop():`"
        )
    return loop


@asynccontextmanager
async def open_asyncio_loop() -> AsyncIterator[asyncio.AbstractEventLoop]:
    """Open an asyncio event loop running inside this Trio run, for the block.

    Open it once around what runs your turns (the :class:`~emelex.app.Engine`, a
    session, a server's request handler); every task started inside the block, and so
    every tool call of those turns, finds it. Nested use reuses the open loop instead
    of starting a second one. On exit the loop cancels the asyncio tasks still running
    and waits for them, like :func:`asyncio.run`.
    """
    existing = trio_asyncio.current_loop.get()
    if existing is not None and not existing.is_closed():
        await trio.lowlevel.checkpoint()
        yield existing
        return
    async with trio_asyncio.open_loop() as loop:
        yield loop


__all__ = [
    "AsyncioLoopMissing",
    "AsyncioTaskCancelled",
    "current_asyncio_loop",
    "open_asyncio_loop",
    "require_asyncio_loop",
]
