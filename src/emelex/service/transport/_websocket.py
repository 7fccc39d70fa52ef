"""A small WebSocket client over a Trio stream.

wsproto (the sans-IO library hypercorn itself uses) makes the opening handshake and
frames what the client sends (masked); what the server sends, every update of a
subscription, is read by the lean ``_wsframes.FrameReader``. This module only moves
bytes. Every receive is bounded (one message at most ``max_message`` bytes, refused from
its header) and every send is awaited, so a subscription's backpressure reaches the Host.
"""

from __future__ import annotations

import contextlib
import os
from typing import Final

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from emelex.service._errors import RequestTooLarge, TransportError
from emelex.service.transport._wsframes import CLOSE, PING, TEXT, FrameReader

_RECEIVE_BYTES: Final = 64 * 1024
#: The most one read asks for while a large frame is arriving.
_LARGE_RECEIVE_BYTES: Final = 1024 * 1024
#: The most the Host's answer to the upgrade request may hold.
MAX_HANDSHAKE_BYTES: Final = 16 * 1024
#: Close codes of the peer that mean "your message was too large".
_TOO_BIG: Final = 1009


class WebSocket:
    """One client connection. Use :meth:`open`; close with :meth:`aclose`."""

    def __init__(self, stream: trio.abc.Stream, max_message: int) -> None:
        self._stream = stream
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._reader = FrameReader(max_message)
        self.close_code: int | None = None
        # A plain socket is read directly (see _receive); other streams (TLS) through
        # receive_some.
        self._socket = stream.socket if type(stream) is trio.SocketStream else None
        self._more = False  # the last read filled its buffer: more may be waiting

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
            await socket._handshake(target)
        except BaseException:
            await stream.aclose()
            raise
        return socket

    async def _handshake(self, target: str) -> None:
        # Only the answer's head goes to wsproto; any frames behind it go to the reader.
        data = b""
        while (end := data.find(b"\r\n\r\n")) < 0:
            if len(data) > MAX_HANDSHAKE_BYTES:
                raise TransportError(f"the Host's answer to the WebSocket at {target} is too large")
            chunk = await self._receive(_RECEIVE_BYTES)
            if not chunk:
                raise TransportError(f"the Host closed the WebSocket at {target} unanswered")
            data += chunk
        try:
            self._ws.receive_data(data[: end + 4])
            events = list(self._ws.events())
        except RemoteProtocolError as exc:
            raise TransportError(f"the Host broke the WebSocket handshake: {exc}") from exc
        if not events or not isinstance(events[0], AcceptConnection):
            if events and isinstance(events[0], RejectConnection | RejectData):
                raise TransportError(f"the Host refused the WebSocket at {target}")
            raise TransportError(f"the Host did not accept the WebSocket at {target}")
        self._reader.feed(data[end + 4 :])

    async def send_text(self, text: str) -> None:
        await self._write(TextMessage(data=text))

    async def receive_text(self) -> str | None:
        """The next whole text message; None once the peer closed."""
        reader = self._reader
        while True:
            message = reader.next_message()
            if message is None:
                # A large frame still arriving is read in larger pieces (fewer wake-ups).
                wanted = min(max(reader.wanted(), _RECEIVE_BYTES), _LARGE_RECEIVE_BYTES)
                data = await self._receive(wanted)
                if not data:
                    raise TransportError("the Host closed the connection")
                reader.feed(data)
            elif message.kind == TEXT:
                return message.text
            elif message.kind == PING:
                await self._write(Pong(payload=message.payload))
            elif message.kind == CLOSE:
                self.close_code = message.code
                if self._ws.state.name == "OPEN":
                    with contextlib.suppress(TransportError):  # the Host may be gone already
                        await self._write(CloseConnection(code=message.code))
                if message.code == _TOO_BIG:
                    raise RequestTooLarge("the Host refused a message as too large")
                return None
            # A pong answers nothing the client asked: ignored.

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

    async def _receive(self, size: int) -> bytes:
        try:
            if self._socket is None:
                return bytes(await self._stream.receive_some(size))
            return await self._read(self._socket, size)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise TransportError(f"the connection to the Host broke: {exc}") from exc

    async def _read(self, socket: trio.socket.SocketType, size: int) -> bytes:
        """Up to ``size`` bytes of a plain socket. ``receive_some`` tries a read first
        and waits after it fails, which for a watch that keeps up (each update a short
        frame that has not arrived yet) is one failed system call per update: here the
        wait comes first unless the last read filled its buffer."""
        if self._more:
            await trio.lowlevel.checkpoint()
        else:
            await trio.lowlevel.wait_readable(socket)
        while True:
            fd = socket.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the connection was closed")
            try:
                data = os.read(fd, size)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(socket)
                continue
            self._more = len(data) == size
            return data
