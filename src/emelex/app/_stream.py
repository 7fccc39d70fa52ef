"""TextStream: one turn's answer text as an async iterator, inside a scope that owns
the turn.

A bare ``async for`` over an async generator cannot own a Trio task: leaving the loop
early does not close the generator, so the turn would run on, detached, until the
generator is garbage collected (and its nursery would then be closed by another task).
The ``async with`` block is the turn's owner instead: it starts the turn on entry and,
on exit, cancels it if it is still running and waits for it to end.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import TYPE_CHECKING, final

import trio

from emelex._facade import NoPublicConstructor
from emelex.agent import AgentTurn, AnswerDelta, TurnCancelled
from emelex.app._errors import StreamNotOpen
from emelex.model import GenerationOptions
from emelex.runtime import AgentCancellation

if TYPE_CHECKING:
    from emelex.app._engine import Session

_NOT_OPEN = (
    "iterate a text stream inside its block: "
    "'async with session.stream_text(...) as texts: async for text in texts: ...'"
)


@final
class TextStream(metaclass=NoPublicConstructor):
    """The answer text of one turn, chunk by chunk (see :meth:`Session.stream_text`).

    Yields the text of every answer delta of the turn (of every model round, so text a
    model writes before calling a tool is included), then ends when the turn has
    committed; :attr:`turn` then holds the committed :class:`~emelex.agent.AgentTurn`.
    A failed turn raises its error from the iteration (and from the block's exit if
    the iteration did not reach it). The stream reads the session's bounded event
    channel, so a slow reader slows the turn down instead of buffering without bound.
    """

    def __init__(
        self,
        session: Session,
        text: str,
        cancellation: AgentCancellation | None,
        options: GenerationOptions | None,
    ) -> None:
        self._session = session
        self._text = text
        self._outer = cancellation
        self._options = options
        self._cancel = AgentCancellation()
        self._finished = trio.Event()
        self._abandoned = False
        self._entered = False
        self._error: Exception | None = None
        self._reported = False
        self._nursery: AbstractAsyncContextManager[trio.Nursery] | None = None
        #: The committed turn, once the stream has ended normally.
        self.turn: AgentTurn | None = None

    # -- the owning block -----------------------------------------------------------------
    async def __aenter__(self) -> TextStream:
        if self._entered:
            raise StreamNotOpen("a text stream runs its turn once; call stream_text again")
        self._entered = True
        self._events = self._session.events()
        self._unlink = (
            self._outer.add_callback(self._cancel.cancel) if self._outer is not None else None
        )
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._nursery = manager
        nursery.start_soon(self._run)
        return self

    async def _run(self) -> None:
        try:
            self.turn = await self._session._send(self._text, self._cancel, self._options)
        except TurnCancelled as exc:
            if not self._abandoned:  # cancelled by the caller's AgentCancellation
                self._error = exc
        except Exception as exc:
            self._error = exc
        finally:
            self._finished.set()
            self._events.end()  # the reader gets what is buffered, then the end

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        assert self._nursery is not None
        if not self._finished.is_set():
            self._abandoned = True
            self._cancel.cancel()
        # Unsubscribe: a turn being torn down must not wait for a reader that left.
        self._events.close()
        try:
            # Not handed the block's exception: the nursery would wrap it in a group.
            await self._nursery.__aexit__(None, None, None)
        finally:
            if self._unlink is not None:
                self._unlink()
        if exc is None and self._error is not None and not self._reported:
            self._reported = True
            raise self._error

    # -- iteration ------------------------------------------------------------------------
    def __aiter__(self) -> TextStream:
        if not self._entered:
            raise StreamNotOpen(_NOT_OPEN)
        return self

    async def __anext__(self) -> str:
        if not self._entered:
            raise StreamNotOpen(_NOT_OPEN)
        while True:
            try:
                event = await self._events.receive()
            except (trio.EndOfChannel, trio.ClosedResourceError):
                break
            if isinstance(event, AnswerDelta) and event.text:
                return event.text
        await self._finished.wait()
        if self._error is not None and not self._reported:
            self._reported = True
            raise self._error  # keeps its own __cause__ (e.g. the model's error)
        raise StopAsyncIteration


__all__ = ["TextStream"]
