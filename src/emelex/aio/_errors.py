"""Errors of emelex.aio."""

from __future__ import annotations

from emelex._errors import EmelexError


class AsyncioLoopMissing(EmelexError, RuntimeError):
    """An asyncio-flavoured tool ran where no asyncio loop is open: wrap the engine or
    session in ``async with open_asyncio_loop():``."""


class AsyncioTaskCancelled(EmelexError):
    """The asyncio side cancelled its own task (``asyncio.CancelledError``) while the
    Trio caller was not cancelled; reported as the call's failure."""


__all__ = ["AsyncioLoopMissing", "AsyncioTaskCancelled"]
