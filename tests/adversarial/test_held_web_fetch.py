"""Issue 18, attacks that held: SSRF host forms, DNS rebinding and a slowloris server.

A loopback listener counts connections: numeric spellings of 127.0.0.1 (decimal, hex,
octal, short, IPv4-mapped IPv6) must be refused before any connection is made, and a
name whose answers change between lookups is resolved once and checked. A server that
dribbles its headers one byte at a time must not hold the fetch past its timeout.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence

import pytest
import trio

from emelex.tools.builtin import WebFetchTool

from .conftest import invoke


class Listener:
    """A loopback TCP server; ``slowloris`` makes it dribble headers forever."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        self.slowloris = False

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        async with stream:
            await stream.receive_some(4096)
            if not self.slowloris:
                await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                return
            await stream.send_all(b"HTTP/1.1 200 OK\r\n")
            while True:
                await stream.send_all(b"X")
                await trio.sleep(0.02)


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    async with trio.open_nursery() as nursery:
        (socket,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        server = Listener(socket.socket.getsockname()[1])
        nursery.start_soon(trio.serve_listeners, server.handle, [socket])
        yield server
        nursery.cancel_scope.cancel()


HOST_FORMS = [
    "2130706433",  # decimal
    "0x7f000001",  # hex
    "0x7f.0.0.1",
    "0177.0.0.1",  # octal
    "127.1",  # short
    "127.0.0.01",
    "[::ffff:7f00:1]",
    "localhost.",
    "LOCALHOST",
]


@pytest.mark.parametrize("host", HOST_FORMS)
async def test_loopback_spellings_are_refused_before_connecting(
    listener: Listener, host: str
) -> None:
    with trio.fail_after(10):
        output = await invoke(
            WebFetchTool(), {"url": f"http://{host}:{listener.port}/"}, approved=True
        )
    assert output.is_error, output.text
    assert listener.connections == 0


class Rebinding:
    """A rebinding DNS server: the checked answer first, another address after. Both
    stay on loopback (the second has no listener), so the test sends nothing off the
    machine whatever the tool does."""

    def __init__(self) -> None:
        self.lookups = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.lookups += 1
        return ["127.0.0.1"] if self.lookups == 1 else ["127.0.0.2"]


async def test_a_rebinding_name_is_resolved_once_and_the_checked_address_used(
    listener: Listener,
) -> None:
    resolver = Rebinding()
    tool = WebFetchTool(allow_private=True, resolver=resolver, timeout_seconds=2)
    with trio.fail_after(10):
        output = await invoke(tool, {"url": f"http://rebind.test:{listener.port}/"}, approved=True)
    assert not output.is_error, output.text
    assert resolver.lookups == 1
    assert listener.connections == 1


async def test_a_slowloris_server_does_not_outlast_the_timeout(listener: Listener) -> None:
    listener.slowloris = True
    tool = WebFetchTool(allow_private=True, timeout_seconds=0.5)
    started = time.perf_counter()
    with trio.fail_after(10):
        output = await invoke(tool, {"url": f"http://127.0.0.1:{listener.port}/"}, approved=True)
    assert output.is_error
    assert time.perf_counter() - started < 3.0
    assert listener.connections == 1
