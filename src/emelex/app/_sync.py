"""Synchronous entry points for scripts and notebooks: they start Trio themselves.

Inside a running event loop (an ``async def``, a notebook kernel's asyncio loop) a
nested ``trio.run`` would block that loop or fail obscurely, so these refuse up front
with :class:`LoopAlreadyRunning`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from emelex.app._errors import LoopAlreadyRunning

if TYPE_CHECKING:
    from emelex.app._agent import Agent
    from emelex.model import GenerationOptions

T = TypeVar("T")


def _refuse_inside_a_loop(what: str) -> None:
    # asyncio first: once trio-asyncio is imported (emelex.aio), asyncio.run() itself
    # runs on Trio, and the user is inside an asyncio loop all the same.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise LoopAlreadyRunning(
            f"{what} cannot run inside a running asyncio loop (a notebook cell, an async "
            "def); await the async API there, through trio-asyncio or a worker thread"
        )
    if trio.lowlevel.in_trio_run():
        raise LoopAlreadyRunning(
            f"{what} starts its own Trio loop and cannot run inside trio.run(); "
            "await the async API instead"
        )


def run_sync(async_fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run(async_fn, *args)`` for synchronous code, refusing with
    :class:`LoopAlreadyRunning` when a Trio or asyncio loop already runs in this
    thread. Returns what ``async_fn`` returns and raises what it raises."""
    _refuse_inside_a_loop("run_sync")
    return trio.run(async_fn, *args)


def run_agent_sync(
    agent: Agent,
    text: str,
    *,
    output_type: Any = None,
    options: GenerationOptions | None = None,
    harness: Any = None,
) -> Any:
    """One turn of ``agent`` in a fresh engine and session (see :meth:`Agent.run_sync`)."""
    _refuse_inside_a_loop("Agent.run_sync")
    from emelex.app._engine import Engine
    from emelex.app._harness import Harness

    if harness is not None and not isinstance(harness, Harness):
        raise TypeError(f"harness must be a Harness, got {type(harness).__name__}")

    async def main() -> Any:
        async with Engine() as engine:
            starter = engine.create(agent)
            if harness is not None:
                starter = starter.harness(harness)
            session = await starter.start()
            async with session:
                return await session.send_and_wait(text, options=options, output_type=output_type)

    return trio.run(main)


__all__ = ["run_agent_sync", "run_sync"]
