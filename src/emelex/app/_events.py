"""Session events over bounded channels, with back-pressure on the turn.

The harness delivers events to a plain (synchronous) callback, so it cannot wait for a
slow consumer by itself. A session therefore:

1. hands every event to each subscribed :class:`EventStream`, which puts it into its
   bounded Trio memory channel, or into a small overflow queue when the channel is
   full (the callback never blocks and never drops);
2. waits for room at the turn's own await points, so the overflow queue cannot grow
   without bound: before pulling each model event (the model stream is wrapped),
   before each tool invocation and before each tool progress report (tools and their
   invocations are wrapped), and once more before ``send_and_wait`` returns.

So a consumer that reads slowly slows the turn down (back-pressure) and memory stays
bounded by the channel capacity plus the events one step emits at once (one model
event, or the proposals and approvals of one tool batch). A running tool whose turn is
being cancelled does not wait: its progress reports are dropped instead.
"""

from __future__ import annotations

import collections
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any

import attrs
import trio

from emelex.agent import AgentEvent, SessionClosed
from emelex.app._policy import ToolWrapper
from emelex.model import AgentModel, Capabilities, GenerationEvent, GenerationRequest
from emelex.model import GenerationStream as _GenerationStream
from emelex.runtime import AgentCancellation
from emelex.tools import AgentTool, ToolInvocation, ToolOutput

#: Default capacity of each event stream's channel.
DEFAULT_EVENT_BUFFER = 256


class EventStream:
    """An async iterator over one session's events, from the moment
    :meth:`Session.events` was called until the session closes (then iteration ends).

    Backed by a bounded channel: when it is full the session's turn waits for this
    consumer (see the module docs). Close it (``async with`` / :meth:`aclose`) to
    unsubscribe; a closed stream no longer holds the turn back.
    """

    def __init__(self, hub: EventHub, capacity: int) -> None:
        self._hub = hub
        self._send, self._receive = trio.open_memory_channel[AgentEvent](capacity)
        self._overflow: collections.deque[AgentEvent] = collections.deque()
        self._lock = trio.Lock()
        self._closed = False

    @property
    def pending(self) -> int:
        """Events waiting for room in the channel (the overflow queue)."""
        return len(self._overflow)

    @property
    def buffered(self) -> int:
        """Events in the channel, ready to be received."""
        return self._send.statistics().current_buffer_used

    def offer(self, event: AgentEvent) -> None:
        """Take one event without blocking (called from the turn's event callback)."""
        if self._closed:
            return
        if self._overflow:
            self._overflow.append(event)
            return
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self._overflow.append(event)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._stop()

    async def drain(self) -> None:
        """Wait until every overflowed event is in the channel."""
        if not self._overflow:
            return
        async with self._lock:
            while self._overflow and not self._closed:
                try:
                    await self._send.send(self._overflow[0])
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._stop()
                    return
                self._overflow.popleft()

    def _stop(self) -> None:
        self._closed = True
        self._overflow.clear()

    def end(self) -> None:
        """The session closed: the consumer gets what is buffered, then the end."""
        self._send.close()
        self._stop()

    # -- consumer side --------------------------------------------------------------------
    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> AgentEvent:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def receive(self) -> AgentEvent:
        """The next event; raises ``trio.EndOfChannel`` after the session closed."""
        return await self._receive.receive()

    def close(self) -> None:
        """Unsubscribe now; a turn waiting for this consumer resumes."""
        self._stop()
        self._receive.close()
        self._hub.unsubscribe(self)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class EventHub:
    """Fans a session's events out to its streams and is its back-pressure gate."""

    def __init__(self, capacity: int = DEFAULT_EVENT_BUFFER) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"the event buffer must be a positive integer, got {capacity!r}")
        self._capacity = capacity
        self._streams: list[EventStream] = []
        self._closed = False

    @property
    def capacity(self) -> int:
        return self._capacity

    def subscribe(self) -> EventStream:
        if self._closed:
            raise SessionClosed("the session is closed")
        stream = EventStream(self, self._capacity)
        self._streams.append(stream)
        return stream

    def unsubscribe(self, stream: EventStream) -> None:
        if stream in self._streams:
            self._streams.remove(stream)

    def emit(self, event: AgentEvent) -> None:
        """The session's event callback: never blocks, never raises."""
        for stream in tuple(self._streams):
            stream.offer(event)

    async def drain(self) -> None:
        for stream in tuple(self._streams):
            await stream.drain()

    async def wait_for_room(self, cancellation: AgentCancellation | None = None) -> bool:
        """Drain every stream; stop waiting (and return False) if ``cancellation``
        fires first."""
        if not any(stream.pending for stream in self._streams):
            return True
        if cancellation is None:
            await self.drain()
            return True
        if cancellation.cancelled:
            return False
        with trio.CancelScope() as scope:
            remove = cancellation.add_callback(scope.cancel)
            try:
                await self.drain()
            finally:
                remove()
        return not scope.cancelled_caught

    def close(self) -> None:
        self._closed = True
        for stream in self._streams:
            stream.end()
        self._streams.clear()


# -- the gates ---------------------------------------------------------------------------


class GatedModel:
    """An AgentModel that waits for room in the event streams before each event."""

    def __init__(self, inner: AgentModel, hub: EventHub) -> None:
        self._inner = inner
        self._hub = hub

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    def generate(self, request: GenerationRequest) -> _GatedGeneration:
        return _GatedGeneration(self._inner.generate(request), self._hub)


class _GatedStream:
    def __init__(self, stream: _GenerationStream, hub: EventHub) -> None:
        self._stream = stream
        self._hub = hub

    def __aiter__(self) -> _GatedStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        await self._hub.wait_for_room()
        return await self._stream.__anext__()


class _GatedGeneration(AbstractAsyncContextManager[_GenerationStream]):
    def __init__(
        self, inner: AbstractAsyncContextManager[_GenerationStream], hub: EventHub
    ) -> None:
        self._inner = inner
        self._hub = hub

    async def __aenter__(self) -> _GenerationStream:
        return _GatedStream(await self._inner.__aenter__(), self._hub)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        return await self._inner.__aexit__(exc_type, exc, traceback)


@attrs.frozen
class _GatedInvocation(ToolInvocation):
    """The invocation a wrapped tool sees: progress waits for room first."""

    _inner: ToolInvocation = attrs.field(kw_only=True, alias="inner")
    _hub: EventHub = attrs.field(kw_only=True, alias="hub")

    async def progress(
        self, message: str, *, completed: int | None = None, total: int | None = None
    ) -> None:
        if await self._hub.wait_for_room(self.cancellation):
            await self._inner.progress(message, completed=completed, total=total)
        else:
            await trio.lowlevel.checkpoint()


class GatedTool(ToolWrapper):
    """A tool that waits for room in the event streams before it starts and before
    each progress report (not while its turn is being cancelled)."""

    def __init__(self, inner: AgentTool, hub: EventHub) -> None:
        super().__init__(inner)
        self._hub = hub

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        await self._hub.wait_for_room(invocation.cancellation)
        gated = _GatedInvocation(
            invocation.call,
            invocation.cancellation,
            invocation.turn_id,
            invocation.session_id,
            approved=invocation.approved,
            inner=invocation,
            hub=self._hub,
        )
        return await self._inner.invoke(gated)


def gate_tool(tool: AgentTool, hub: EventHub) -> Any:
    return GatedTool(tool, hub)


__all__ = ["DEFAULT_EVENT_BUFFER", "EventHub", "EventStream", "GatedModel", "GatedTool"]
