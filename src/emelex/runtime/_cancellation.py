"""AgentCancellation: a cooperative, observable cancel signal shared by a turn's actors."""

from __future__ import annotations

from collections.abc import Callable

import trio


class AgentCancellation:
    """A one-way cancel signal: once :meth:`cancel` is called it stays cancelled.

    Cancelling stops a turn's model generation and pending approvals, and asks running
    cooperative tools to stop (tools may ``await wait_cancelled()`` beside their own I/O).
    Not thread-safe: call :meth:`cancel` from the Trio thread (use
    ``trio.from_thread.run_sync`` elsewhere).
    """

    __slots__ = ("_callbacks", "_cancelled", "_event")

    def __init__(self) -> None:
        self._cancelled = False
        self._event: trio.Event | None = None
        self._callbacks: dict[int, Callable[[], object]] = {}

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Request cancellation (idempotent; does not checkpoint)."""
        if self._cancelled:
            return
        self._cancelled = True
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, {}
        for callback in callbacks.values():
            callback()

    async def wait_cancelled(self) -> None:
        """Return once cancelled. A checkpoint; cancellable by Trio like any wait."""
        if self._cancelled:
            await trio.lowlevel.checkpoint()
            return
        if self._event is None:
            self._event = trio.Event()
        await self._event.wait()

    def add_callback(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Call ``callback`` on cancellation (now, if already cancelled). Returns a
        function that unregisters it."""
        if self._cancelled:
            callback()
            return _noop
        key = id(callback)
        while key in self._callbacks:
            key += 1
        self._callbacks[key] = callback

        def remove() -> None:
            self._callbacks.pop(key, None)

        return remove

    def child(self) -> AgentCancellation:
        """A new signal cancelled whenever this one is (but not the other way round)."""
        child = AgentCancellation()
        self.add_callback(child.cancel)
        return child

    def __repr__(self) -> str:
        return f"<AgentCancellation cancelled={self._cancelled}>"


def _noop() -> None:
    return None
