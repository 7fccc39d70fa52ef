"""The Host's WebSocket server (``_wsserver``) against the client over a real socket pair:
frames larger than the socket's buffer are written in part at once and the rest waited
for, in order, and a peer that left is noticed."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import trio
import trio.testing

from emelex.service.transport._websocket import WebSocket
from emelex.service.transport._wsserver import is_websocket, read_head, serve_websocket

#: Past the frame cache's bound a text is encoded and written a piece at a time: ASCII,
#: two-byte and four-byte characters across the pieces' boundaries.
TEXTS = ["a" * 3_000_000, "small", "é" * 700_000, "last", "a\U0001f600" * 300_001]


async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    assert (await receive())["type"] == "websocket.connect"
    await send({"type": "websocket.accept"})
    for text in TEXTS:
        await send({"type": "websocket.send", "text": text})
    await send({"type": "websocket.close", "code": 1000})


async def test_frames_larger_than_the_socket_buffer_arrive_whole_and_in_order() -> None:
    left, right = trio.socket.socketpair()
    server = trio.SocketStream(right)

    async def serve() -> None:
        head = await read_head(server)
        assert is_websocket(head)
        await serve_websocket(app, server, head, 1 << 16)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            client = await WebSocket.open(
                trio.SocketStream(left), host="h", target="/", headers=[], max_message=1 << 23
            )
            try:
                got = []
                while (text := await client.receive_text()) is not None:
                    got.append(text)
                    # A slow reader: the server fills the socket buffer and waits in its
                    # write before each next read.
                    await trio.testing.wait_all_tasks_blocked()
            finally:
                await client.aclose()
    await server.aclose()
    assert got == TEXTS
    assert client.close_code == 1000


async def test_a_send_to_a_peer_that_left_ends_quietly() -> None:
    left, right = trio.socket.socketpair()
    server = trio.SocketStream(right)
    sent = trio.Event()

    async def app_after_leave(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        await sent.wait()
        for _ in range(3):  # the first write may land in the buffer; then EPIPE
            await send({"type": "websocket.send", "text": "x" * 300_000})
        assert (await receive())["type"] == "websocket.disconnect"

    async def serve() -> None:
        head = await read_head(server)
        await serve_websocket(app_after_leave, server, head, 1 << 16)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            client = await WebSocket.open(
                trio.SocketStream(left), host="h", target="/", headers=[], max_message=1 << 23
            )
            await trio.aclose_forcefully(client._stream)
            sent.set()
    await server.aclose()
