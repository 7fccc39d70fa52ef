"""Session events over bounded channels: readers are waited for, a stalled one is dropped.

The harness delivers events to a plain (synchronous) callback, so a session:

1. hands every event to each subscribed :class:`EventStream`, which puts it into its
   bounded Trio memory channel or, when that is full, into an overflow queue (the
   callback never blocks and never drops);
2. at the turn's own await points (before pulling each model event, before each tool
   invocation and each tool progress report, and before ``send_and_wait`` returns)
   lets the consumers catch up: it yields to them as long as they keep reading, and
   stops after two rounds of scheduling in which none of them read anything;
3. then drops every stream whose overflow still holds more than its capacity.

So a consumer that keeps reading slows the turn down (back-pressure), while one that
stops reading (or falls two buffers behind) never stalls it: the stream is dropped
and, after the events in its channel, its consumer gets :class:`EventsLagged`. The
session, its turn and every other subscriber go on. Memory per stream is bounded by
twice its capacity plus the events one step emits at once (one model event, or the
proposals and approvals of one tool batch).
"""

from __future__ import annotations

import collections
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, final

import attrs
import trio

from emelex._facade import NoPublicConstructor
from emelex.agent import AgentEvent, SessionClosed
from emelex.app._errors import EventsLagged
from emelex.app._policy import ToolWrapper
from emelex.model import AgentModel, Capabilities, GenerationEvent, GenerationRequest
from emelex.model import GenerationStream as _GenerationStream
from emelex.tools import AgentTool, ToolInvocation, ToolOutput

#: Default capacity of each event stream's channel.
DEFAULT_EVENT_BUFFER = 256


@final
class EventStream(trio.abc.AsyncResource, metaclass=NoPublicConstructor):
    """An async iterator over one session's events, from the moment
    :meth:`Session.events` was called until the session closes (then iteration ends).

    Backed by a bounded channel of ``capacity`` events and an overflow queue. The
    turn yields to a consumer that keeps reading but never waits for one that does
    not: a stream more than ``capacity`` events behind its full channel at one of the
    turn's steps is dropped and, after the events in its channel, its consumer gets
    :class:`EventsLagged` (from ``async for`` and :meth:`receive`). Close it
    (``async with`` / :meth:`aclose`) to unsubscribe.
    """

    def __init__(self, hub: EventHub, capacity: int) -> None:
        self._hub = hub
        self._capacity = capacity
        self._send, self._receive = trio.open_memory_channel[AgentEvent](capacity)
        self._overflow: collections.deque[AgentEvent] = collections.deque()
        self._closed = False
        self._lagged = False
        self._delivered = 0
        self._received = 0

    @property
    def buffered(self) -> int:
        """Events in the channel, ready to be received."""
        return self._send.statistics().current_buffer_used

    @property
    def received(self) -> int:
        """Events the consumer took (how the turn sees that it keeps reading)."""
        return self._received

    @property
    def pending(self) -> int:
        """Events waiting for room in the channel (the overflow queue)."""
        return len(self._overflow)

    @property
    def lagged(self) -> bool:
        """True once the stream was dropped for falling two buffers behind."""
        return self._lagged

    def offer(self, event: AgentEvent) -> None:
        """Take one event without blocking (called from the turn's event callback)."""
        if self._closed:
            return
        self._overflow.append(event)
        self.flush()

    def drop_if_stalled(self) -> None:
        """Drop the stream if, after its consumer had the chance to catch up, it is
        still more than a whole overflow behind."""
        if len(self._overflow) > self._capacity:
            self._lagged = True
            self._stop()
            self._hub.unsubscribe(self)

    def flush(self) -> None:
        """Move overflowed events into the channel while it has room."""
        while self._overflow and not self._closed:
            try:
                self._send.send_nowait(self._overflow[0])
            except trio.WouldBlock:
                return
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._stop()
                return
            self._overflow.popleft()
            self._delivered += 1

    def _stop(self) -> None:
        self._closed = True
        self._overflow.clear()
        self._send.close()

    def end(self) -> None:
        """The session closed: the consumer gets what is buffered, then the end."""
        self.flush()
        self._stop()

    def _lagged_error(self) -> EventsLagged:
        return EventsLagged(
            f"this event stream fell more than {2 * self._capacity:,} events behind and was "
            f"dropped after {self._delivered:,} events; the session went on without it "
            "(read concurrently with the turn, or subscribe with a larger event_buffer)"
        )

    # -- consumer side --------------------------------------------------------------------
    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> AgentEvent:
        try:
            return await self.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def receive(self) -> AgentEvent:
        """The next event; raises ``trio.EndOfChannel`` after the session closed and
        :class:`EventsLagged` once a dropped stream's buffered events are read."""
        try:
            event = await self._receive.receive()
        except trio.EndOfChannel:
            if self._lagged:
                raise self._lagged_error() from None
            raise
        self._received += 1
        return event

    def close(self) -> None:
        """Unsubscribe now."""
        self._stop()
        self._receive.close()
        self._hub.unsubscribe(self)

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


class EventHub:
    """Fans a session's events out to its streams (never blocking the turn)."""

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
        stream = EventStream._create(self, self._capacity)
        self._streams.append(stream)
        return stream

    def unsubscribe(self, stream: EventStream) -> None:
        if stream in self._streams:
            self._streams.remove(stream)

    def emit(self, event: AgentEvent) -> None:
        """The session's event callback: never blocks, never raises."""
        for stream in tuple(self._streams):
            stream.offer(event)

    async def settle(self) -> None:
        """Let consumers that keep reading catch up with their overflow, then drop the
        streams still more than a whole overflow behind. Stops yielding after two
        rounds of scheduling in which no stream that is behind was read from (one
        round could pass before a ready reader is scheduled)."""
        idle = 0
        while idle < 2:
            behind = [stream for stream in self._streams if stream.pending]
            if not behind:
                return
            before = sum(stream.received for stream in behind)
            await trio.lowlevel.checkpoint()
            for stream in behind:
                stream.flush()
            idle = 0 if sum(stream.received for stream in behind) != before else idle + 1
        for stream in tuple(self._streams):
            stream.drop_if_stalled()

    def close(self) -> None:
        self._closed = True
        for stream in self._streams:
            stream.end()
        self._streams.clear()


# -- the gates ---------------------------------------------------------------------------


class GatedModel:
    """An AgentModel that lets event consumers catch up before each event."""

    def __init__(self, inner: AgentModel, hub: EventHub) -> None:
        self._inner = inner
        self._hub = hub

    @property
    def wrapped(self) -> AgentModel:
        """The model this one wraps (tracing reports the wrapped model's identity)."""
        return self._inner

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
        await self._hub.settle()
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
        await self._hub.settle()
        await self._inner.progress(message, completed=completed, total=total)


class GatedTool(ToolWrapper):
    """A tool that lets event consumers catch up before it starts and before each
    progress report."""

    def __init__(self, inner: AgentTool, hub: EventHub) -> None:
        super().__init__(inner)
        self._hub = hub

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        await self._hub.settle()
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


__all__ = [
    "DEFAULT_EVENT_BUFFER",
    "EventHub",
    "EventStream",
    "EventsLagged",
    "GatedModel",
    "GatedTool",
]
