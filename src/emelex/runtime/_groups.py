"""Keep single errors single when they cross a nursery.

Trio nurseries always wrap errors in an ``ExceptionGroup``. Actor scopes are
implementation detail, so an error raised by a scope's own body (the only one it can
hold: actor wrappers capture their children's errors) is re-raised unwrapped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


def single_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The only exception inside ``group`` (searched through nested groups), if exactly one.

    A group holding nothing but ``trio.Cancelled`` counts as one cancellation: the
    enclosing cancel scope treats them all alike.
    """
    cancelled, rest = group.split(trio.Cancelled)
    if rest is None and cancelled is not None:
        return _first_leaf(cancelled)
    if len(group.exceptions) != 1:
        return None
    inner = group.exceptions[0]
    if isinstance(inner, BaseExceptionGroup):
        return single_leaf(inner)
    return inner


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


@asynccontextmanager
async def open_unwrapping_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery whose single failure propagates as itself rather than in a group."""
    try:
        async with trio.open_nursery() as nursery:
            yield nursery
    except BaseExceptionGroup as group:
        leaf = single_leaf(group)
        if leaf is None:
            raise
        context, suppress = leaf.__context__, leaf.__suppress_context__
        try:
            raise leaf
        finally:
            leaf.__context__, leaf.__suppress_context__ = context, suppress
