"""Subscriptions' WebSockets served straight from wsproto, for the same ASGI app.

A connection whose first request is a WebSocket upgrade (every subscription: clients
open a fresh connection for each) is handled here instead of by hypercorn: the app gets
the same ASGI ``websocket`` messages, and each update it sends is one framed
``send_all`` on the socket. hypercorn's general path costs several locked, shielded
hops per message, which dominated a busy session's fan-out to many watchers.
"""

from __future__ import annotations

import os
import re
import struct
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

from emelex.service.transport._frames import MAX_CACHED_TEXT, FrameCache

#: The most a request head may hold before it is refused.
MAX_HEAD_BYTES: Final = 16 * 1024
_UPGRADE: Final = re.compile(rb"\r\nupgrade:[ \t]*websocket[ \t]*\r\n", re.IGNORECASE)
_RECEIVE_BYTES: Final = 64 * 1024
#: Close code for a message over the bound (as hypercorn sends).
TOO_BIG: Final = 1009
#: Code points of a large text frame encoded and written at a time.
_PIECE: Final = 64 * 1024
#: Framed text messages kept for reuse: a session's watchers are sent the same text.
_FRAMED: Final[FrameCache] = FrameCache()

App = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


async def read_head(stream: trio.abc.ReceiveStream) -> bytes:
    """The bytes received up to the end of the first request head (maybe more, never
    less); empty when the peer closed first. Raises ``ValueError`` past
    ``MAX_HEAD_BYTES``."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        chunk = await stream.receive_some(_RECEIVE_BYTES)
        if not chunk:
            return data
        data += chunk
    return data


def is_websocket(head: bytes) -> bool:
    """Whether the first request asks to upgrade to a WebSocket."""
    end = head.find(b"\r\n\r\n")
    return head.startswith(b"GET ") and _UPGRADE.search(head[: end + 2]) is not None


class _Connection:
    """One WebSocket connection speaking ASGI to the app."""

    def __init__(self, stream: trio.abc.Stream, max_message: int) -> None:
        self._stream = stream
        self._ws = WSConnection(ConnectionType.SERVER)
        self._max = max_message
        self._events: list[Event] = []
        self._write_lock = trio.Lock()
        self._connected = False
        self.closed = False

    async def start(self, head: bytes) -> Request | None:
        try:
            self._ws.receive_data(head)
            events = list(self._ws.events())
        except RemoteProtocolError:
            events = []
        if not events or not isinstance(events[0], Request):
            await self._raw(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
            return None
        self._events = events[1:]
        return events[0]

    async def receive(self) -> MutableMapping[str, Any]:
        if not self._connected:
            self._connected = True
            return {"type": "websocket.connect"}
        parts: list[str | bytes] = []
        size = 0
        while True:
            event = await self._next()
            if event is None:
                self.closed = True
                return {"type": "websocket.disconnect", "code": 1006}
            if isinstance(event, TextMessage | BytesMessage):
                size += len(event.data)
                if size > self._max:
                    await self._write(CloseConnection(code=TOO_BIG))
                    self.closed = True
                    return {"type": "websocket.disconnect", "code": TOO_BIG}
                parts.append(event.data if isinstance(event, TextMessage) else bytes(event.data))
                if event.message_finished:
                    if isinstance(event, TextMessage):
                        return {"type": "websocket.receive", "text": "".join(parts)}  # type: ignore[arg-type]
                    return {"type": "websocket.receive", "bytes": b"".join(parts)}  # type: ignore[arg-type]
            elif isinstance(event, Ping):
                await self._write(event.response())
            elif isinstance(event, CloseConnection):
                if not self.closed and self._ws.state.name == "REMOTE_CLOSING":
                    await self._write(event.response())
                self.closed = True
                return {"type": "websocket.disconnect", "code": event.code}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        kind = message["type"]
        if kind == "websocket.accept":
            await self._write(AcceptConnection())
        elif kind == "websocket.send" and not self.closed:
            text = message.get("text")
            if text is not None and self._ws.state is ConnectionState.OPEN:
                if len(text) > MAX_CACHED_TEXT:
                    await self._large_text(text)
                else:
                    await self._raw(text_frame(text))
            elif text is not None:
                await self._write(TextMessage(data=text))
            else:
                await self._write(BytesMessage(data=message.get("bytes") or b""))
        elif kind == "websocket.close" and not self.closed:
            self.closed = True
            await self._write(CloseConnection(code=message.get("code", 1000)))
        elif kind == "websocket.close":
            return
        elif kind == "websocket.send":
            return  # the peer left; the app learns it from receive()
        else:
            await self._write(RejectConnection(status_code=403))

    async def _next(self) -> Event | None:
        while not self._events:
            try:
                data = await self._stream.receive_some(_RECEIVE_BYTES)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            self._ws.receive_data(bytes(data) or None)
            try:
                self._events.extend(self._ws.events())
            except RemoteProtocolError:
                return None
            if not data and not self._events:
                return None
        return self._events.pop(0)

    async def _write(self, event: Event) -> None:
        try:
            data = self._ws.send(event)
        except Exception:  # wsproto refuses a send in a closed state: nothing to write
            self.closed = True
            return
        await self._raw(data)

    async def _raw(self, data: bytes) -> None:
        # Only a ping's or close's answer ever contends: take the free lock without the
        # extra scheduling round trip of `acquire` (send_all checkpoints anyway).
        try:
            self._write_lock.acquire_nowait()
        except trio.WouldBlock:
            await self._write_lock.acquire()
        try:
            sent = self._write_now(data)
            if sent < len(data):
                await self._stream.send_all(memoryview(data)[sent:] if sent else data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True
        finally:
            self._write_lock.release()

    async def _large_text(self, text: str) -> None:
        """A text frame too large for the frame cache, encoded and written a piece at a
        time: a connection holds one piece, never a copy of the whole frame (an idle
        watcher of a 30 MB row would otherwise hold 30 MB until it reads)."""
        size = len(text) if text.isascii() else utf8_length(text)
        await self._write_lock.acquire()
        try:
            await self._stream.send_all(frame_head(size))
            for start in range(0, len(text), _PIECE):
                await self._stream.send_all(text[start : start + _PIECE].encode())
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.closed = True
        finally:
            self._write_lock.release()

    def _write_now(self, data: bytes) -> int:
        """Write what the socket takes right now, without waiting or yielding: a frame
        that fits its buffer (the usual update) goes out without the scheduling round
        trip of ``send_all``; the rest, if any, is left to ``send_all``, which waits.
        Only for a plain socket stream (TLS frames go through the TLS stream)."""
        if type(self._stream) is not trio.SocketStream:
            return 0
        fd = self._stream.socket.fileno()
        if fd < 0:
            return 0  # closed: send_all raises the right error
        try:
            return os.write(fd, data)
        except BlockingIOError:
            return 0
        except OSError as exc:  # the peer left (EPIPE, ECONNRESET)
            raise trio.BrokenResourceError(str(exc)) from exc


def frame_head(size: int) -> bytes:
    """The header of an unmasked, unfragmented server text frame of ``size`` bytes."""
    if size < 126:
        return bytes((0x81, size))
    if size < 1 << 16:
        return struct.pack("!BBH", 0x81, 126, size)
    return struct.pack("!BBQ", 0x81, 127, size)


def utf8_length(text: str) -> int:
    """The bytes of ``text`` in UTF-8, counted a piece at a time (never a whole copy)."""
    return sum(len(text[start : start + _PIECE].encode()) for start in range(0, len(text), _PIECE))


def text_frame(text: str) -> bytes:
    """The unmasked, unfragmented server frame of a text message (RFC 6455 5.2), the
    same bytes for every connection, so each distinct text is framed once."""
    framed: bytes | None = _FRAMED.get(text)
    if framed is None:
        payload = text.encode()
        framed = frame_head(len(payload)) + payload
        size = len(payload)
        if size <= MAX_CACHED_TEXT:
            _FRAMED.put(text, framed)
    return framed


async def serve_websocket(app: App, stream: trio.abc.Stream, head: bytes, max_message: int) -> None:
    """Run ``app`` for the WebSocket whose upgrade request is ``head``."""
    connection = _Connection(stream, max_message)
    request = await connection.start(head)
    if request is None:
        return
    path, _, query = request.target.partition("?")
    headers = [(b"host", request.host.encode())]
    headers += [(bytes(k).lower(), bytes(v)) for k, v in request.extra_headers]
    scope: dict[str, Any] = {
        "type": "websocket",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "scheme": "ws",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "subprotocols": request.subprotocols,
        "extensions": {},
    }
    await app(scope, connection.receive, connection.send)
