"""A small WebSocket client: wsproto's protocol state machine over a Trio stream.

wsproto (the sans-IO library hypercorn itself uses) does the framing; this module only
moves bytes. Every receive is bounded (one message at most ``max_message`` bytes) and
every send is awaited, so a subscription's backpressure reaches the Host.
"""

from __future__ import annotations

import contextlib
from typing import Final

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from emelex.service._errors import RequestTooLarge, TransportError

_RECEIVE_BYTES: Final = 64 * 1024
#: Close codes of the peer that mean "your message was too large".
_TOO_BIG: Final = 1009


class WebSocket:
    """One client connection. Use :meth:`open`; close with :meth:`aclose`."""

    def __init__(self, stream: trio.abc.Stream, max_message: int) -> None:
        self._stream = stream
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._max = max_message
        self._events: list[Event] = []
        self._parts: list[str] = []
        self._size = 0
        self.close_code: int | None = None

    @classmethod
    async def open(
        cls,
        stream: trio.abc.Stream,
        *,
        host: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        max_message: int,
    ) -> WebSocket:
        socket = cls(stream, max_message)
        try:
            await socket._write(Request(host=host, target=target, extra_headers=headers))
            while True:
                event = await socket._next()
                if isinstance(event, AcceptConnection):
                    return socket
                if isinstance(event, RejectConnection | RejectData):
                    raise TransportError(f"the Host refused the WebSocket at {target}")
        except BaseException:
            await stream.aclose()
            raise

    async def send_text(self, text: str) -> None:
        await self._write(TextMessage(data=text))

    async def receive_text(self) -> str | None:
        """The next whole text message; None once the peer closed."""
        while True:
            event = await self._next()
            if isinstance(event, TextMessage):
                self._size += len(event.data)
                if self._size > self._max:
                    raise RequestTooLarge(f"a message from the Host exceeds {self._max} bytes")
                self._parts.append(event.data)
                if event.message_finished:
                    text = "".join(self._parts)
                    self._parts, self._size = [], 0
                    return text
            elif isinstance(event, Ping):
                await self._write(event.response())
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                if self._ws.state.name == "REMOTE_CLOSING":
                    with contextlib.suppress(TransportError):  # the Host may be gone already
                        await self._write(event.response())
                if event.code == _TOO_BIG:
                    raise RequestTooLarge("the Host refused a message as too large")
                return None

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            try:
                if self._ws.state.name == "OPEN":
                    await self._write(CloseConnection(code=1000))
            except TransportError:
                pass
        await trio.aclose_forcefully(self._stream)

    async def _write(self, event: Event) -> None:
        try:
            await self._stream.send_all(self._ws.send(event))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise TransportError(f"the connection to the Host broke: {exc}") from exc

    async def _next(self) -> Event:
        while not self._events:
            try:
                data = await self._stream.receive_some(_RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                raise TransportError(f"the connection to the Host broke: {exc}") from exc
            self._ws.receive_data(bytes(data) or None)
            try:
                self._events.extend(self._ws.events())
            except RemoteProtocolError as exc:
                raise TransportError(f"the Host broke the WebSocket protocol: {exc}") from exc
            if not data and not self._events:
                raise TransportError("the Host closed the connection")
        return self._events.pop(0)
