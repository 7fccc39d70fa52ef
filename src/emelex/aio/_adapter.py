"""Run ``async def`` functions written for asyncio from Trio tools."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec, TypeVar, overload

import trio

from emelex.aio._loop import AsyncioTaskCancelled, require_asyncio_loop
from emelex.tools import FunctionTool, InvalidToolFunction, tool

P = ParamSpec("P")
R = TypeVar("R")
#: A needs_approval rule, as @tool takes it.
ApprovalRule = Callable[[Any], bool]

#: Set on every function :func:`from_asyncio` returns (check_tool_contract opens a loop
#: for such tools).
MARKER = "__emelex_asyncio__"


def from_asyncio(function: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]:
    """A Trio-flavoured ``async def`` that runs the asyncio ``function`` on the open
    asyncio loop (:func:`~emelex.aio.open_asyncio_loop`) and keeps its name, signature,
    annotations and docstring, so ``@tool`` reads it as it would read ``function``::

        @tool(interruptible=True)
        @from_asyncio
        async def fetch(url: str) -> str:
            ...  # asyncio code: aiohttp, asyncpg, asyncio streams, ...

    Cancelling the Trio caller cancels the asyncio task: ``asyncio.CancelledError`` is
    raised inside ``function`` at its current ``await``, and the call ends with Trio's
    ``Cancelled`` once the task has finished (even when the function swallows the
    asyncio cancellation). Raises :class:`~emelex.aio.AsyncioLoopMissing` when called
    with no loop open and :class:`~emelex.tools.InvalidToolFunction` for a function that
    is not ``async def``.
    """
    if inspect.isasyncgenfunction(function) or not inspect.iscoroutinefunction(function):
        name = getattr(function, "__qualname__", None) or repr(function)
        raise InvalidToolFunction(
            f"cannot adapt {name}: from_asyncio takes an asyncio `async def` function"
        )
    what = getattr(function, "__qualname__", "function")

    @functools.wraps(function)
    async def on_asyncio(*args: P.args, **kwargs: P.kwargs) -> R:
        loop = require_asyncio_loop(what)
        try:
            result: R = await loop.run_aio_coroutine(function(*args, **kwargs))
        except asyncio.CancelledError as exc:
            # Only reached when Trio did not cancel us: the asyncio side cancelled
            # itself. asyncio.CancelledError is a BaseException; make it a failure.
            raise AsyncioTaskCancelled(f"{what}: the asyncio task was cancelled") from exc
        # A function that catches CancelledError and returns still had its caller
        # cancelled: never let that cancellation be lost.
        await trio.lowlevel.checkpoint_if_cancelled()
        return result

    setattr(on_asyncio, MARKER, True)
    return on_asyncio


def runs_on_asyncio(function: object) -> bool:
    """True for a function made by :func:`from_asyncio` (or a tool made of one)."""
    target = getattr(function, "function", function)
    return bool(getattr(target, MARKER, False))


@overload
def asyncio_tool(function: Callable[..., Awaitable[Any]], /) -> FunctionTool: ...


@overload
def asyncio_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool | ApprovalRule = False,
    rename: Mapping[str, str] | None = None,
    interruptible: bool = False,
) -> Callable[[Callable[..., Awaitable[Any]]], FunctionTool]: ...


def asyncio_tool(
    function: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool | ApprovalRule = False,
    rename: Mapping[str, str] | None = None,
    interruptible: bool = False,
) -> FunctionTool | Callable[[Callable[..., Awaitable[Any]]], FunctionTool]:
    """``@tool`` for an asyncio ``async def``: ``tool(...)(from_asyncio(function))``.

    Takes the options of :func:`~emelex.tools.tool`. Annotations must resolve at module
    level; for a class defined inside a function body, stack ``@tool(...)`` over
    ``@from_asyncio`` instead (``@tool`` then sees the enclosing scope).
    """
    options: dict[str, Any] = {
        "name": name,
        "description": description,
        "needs_approval": needs_approval,
        "rename": rename,
        "interruptible": interruptible,
    }

    def decorate(fn: Callable[..., Awaitable[Any]]) -> FunctionTool:
        made: FunctionTool = tool(**options)(from_asyncio(fn))
        return made

    if function is not None:
        return decorate(function)
    return decorate


__all__ = ["MARKER", "asyncio_tool", "from_asyncio", "runs_on_asyncio"]
