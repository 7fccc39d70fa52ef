"""The client's WebSocket (``_websocket``) against a wsproto server over a real socket
pair: handshake, frames right behind it, fragments with pings between them, the close
handshake, bounds, protocol errors and cancellation mid-message."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Pong, Request, TextMessage
from wsproto.frame_protocol import FrameProtocol

from emelex.service import RequestTooLarge, TransportError
from emelex.service.transport._websocket import WebSocket


class Server:
    """The server end: wsproto for the handshake and for what the client sends."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.SERVER)
        self.events: list[object] = []

    async def accept(self, trailing: bytes = b"") -> None:
        while not any(isinstance(e, Request) for e in self.events):
            await self.pump()
        self.events = [e for e in self.events if not isinstance(e, Request)]
        await self.stream.send_all(self.ws.send(AcceptConnection()) + trailing)

    async def pump(self) -> None:
        data = await self.stream.receive_some(65536)
        self.ws.receive_data(data or None)
        self.events += list(self.ws.events())

    async def next_event(self) -> object:
        while not self.events:
            await self.pump()
        return self.events.pop(0)

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)


def _text(text: str) -> bytes:
    return bytes(FrameProtocol(client=False, extensions=[]).send_data(text, fin=True))


def _raw(first: int, payload: bytes) -> bytes:
    assert len(payload) < 126
    return bytes((first, len(payload))) + payload


async def _open(client_end: trio.SocketStream, max_message: int = 1 << 20) -> WebSocket:
    return await WebSocket.open(
        client_end, host="h", target="/v1/sub/watch", headers=[], max_message=max_message
    )


@asynccontextmanager
async def connected(
    trailing: bytes = b"", max_message: int = 1 << 20
) -> AsyncIterator[tuple[WebSocket, Server]]:
    left, right = trio.socket.socketpair()
    server = Server(trio.SocketStream(right))
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.accept, trailing)
            socket_ = await _open(trio.SocketStream(left), max_message)
        try:
            yield socket_, server
        finally:
            await socket_.aclose()
    finally:
        await server.stream.aclose()


async def test_frames_behind_the_handshake_and_fragments_around_pings() -> None:
    with trio.fail_after(10):
        # The first update arrives in the same segment as the 101 answer.
        async with connected(trailing=_raw(0x81, b'{"a":1}')) as (socket_, server):
            assert await socket_.receive_text() == '{"a":1}'
            encoded = "é!".encode()
            await server.send(_raw(0x01, encoded[:1]) + _raw(0x89, b"hi") + _raw(0x80, encoded[1:]))
            assert await socket_.receive_text() == "é!"
            # The ping was answered with its payload.
            assert await server.next_event() == Pong(payload=b"hi")
            await server.send(_text("x" * 200_000))
            assert await socket_.receive_text() == "x" * 200_000
            # The close handshake: None, the code kept, the close echoed.
            await server.send(server.ws.send(CloseConnection(code=1000)))
            assert await socket_.receive_text() is None
            assert socket_.close_code == 1000
            event = await server.next_event()
            assert isinstance(event, CloseConnection) and event.code == 1000


async def test_what_the_client_sends_is_masked_text() -> None:
    with trio.fail_after(10):
        async with connected() as (socket_, server):
            await socket_.send_text('{"sessionId":"s"}')
            assert await server.next_event() == TextMessage(data='{"sessionId":"s"}')
            await socket_.aclose()
            event = await server.next_event()
            assert isinstance(event, CloseConnection) and event.code == 1000


async def test_a_too_big_message_is_refused_before_it_arrives() -> None:
    with trio.fail_after(10):
        async with connected(max_message=1000) as (socket_, server):
            # Only the header of a 1 GiB frame is ever sent.
            await server.send(bytes((0x81, 127)) + struct.pack("!Q", 1 << 30))
            with pytest.raises(RequestTooLarge):
                await socket_.receive_text()


async def test_a_close_as_too_big_raises_request_too_large() -> None:
    with trio.fail_after(10):
        async with connected() as (socket_, server):
            await server.send(server.ws.send(CloseConnection(code=1009)))
            with pytest.raises(RequestTooLarge):
                await socket_.receive_text()
            assert socket_.close_code == 1009


@pytest.mark.parametrize(
    "data",
    [_raw(0x82, b"bin"), _raw(0xC1, b"x"), _raw(0x80, b"x"), _raw(0x81, b"\xff")],
)
async def test_protocol_violations_raise_transport_errors(data: bytes) -> None:
    with trio.fail_after(10):
        async with connected() as (socket_, server):
            await server.send(data)
            with pytest.raises(TransportError, match="broke the WebSocket protocol"):
                await socket_.receive_text()


async def test_the_host_leaving_is_a_transport_error() -> None:
    with trio.fail_after(10):
        async with connected() as (socket_, server):
            await server.send(_raw(0x01, b"half"))
            await server.stream.aclose()
            with pytest.raises(TransportError, match="closed the connection"):
                await socket_.receive_text()


async def test_a_cancelled_receive_keeps_the_message_in_progress() -> None:
    with trio.fail_after(10):
        async with connected() as (socket_, server):
            await server.send(_raw(0x01, b"first "))
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(socket_.receive_text)
                    await trio.testing.wait_all_tasks_blocked()
                    scope.cancel()
            assert scope.cancelled_caught
            await server.send(_raw(0x80, b"half"))
            assert await socket_.receive_text() == "first half"


@pytest.mark.parametrize(
    ("answer", "needle"),
    [
        (b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n", "refused the WebSocket"),
        (b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n", "handshake"),
        (b"HTTP/1.1 200 OK\r\n" + b"x-pad: " + b"y" * 20_000, "too large"),
        (b"", "closed the WebSocket"),
    ],
)
async def test_a_bad_handshake_answer_is_a_transport_error(answer: bytes, needle: str) -> None:
    left, right = trio.socket.socketpair()
    server = trio.SocketStream(right)

    async def answer_it() -> None:
        await server.receive_some(65536)
        if answer:
            await server.send_all(answer)
        else:
            await server.aclose()

    with trio.fail_after(10):
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(answer_it)
                with pytest.raises(TransportError, match=needle):
                    await _open(trio.SocketStream(left))
        finally:
            await server.aclose()
