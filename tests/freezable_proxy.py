"""A loopback TCP proxy in front of a Unix socket that a test can freeze and thaw: a
network partition without closing anything.

Frozen, it forwards nothing in either direction and closes nothing: bytes already read
wait in the proxy, the rest waits in the kernel's socket buffers, and a connection one
side closes stays open on the other side until the thaw (as a partition hides a FIN).
Thawed, everything that waited is delivered in order. New connections are accepted
while frozen (the kernel does that) but see no bytes either.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

_CHUNK = 65536


class FreezableProxy:
    """Created by :func:`open_freezable_proxy`; ``port`` is its loopback TCP port."""

    def __init__(self, target: Path) -> None:
        self._target = target
        self._thawed = trio.Event()
        self._thawed.set()
        self.port = 0
        #: Connections accepted so far, and bytes forwarded to the target after a thaw.
        self.connections = 0
        self.sent_after_thaw = 0
        self._was_frozen = False
        self._armed: tuple[bytes, int] | None = None
        #: Set when a freeze armed by :meth:`freeze_at` happened.
        self.froze = trio.Event()

    @property
    def frozen(self) -> bool:
        return not self._thawed.is_set()

    def freeze(self) -> None:
        if not self.frozen:
            self._thawed = trio.Event()
            self._was_frozen = True

    def freeze_at(self, marker: bytes, occurrence: int = 1) -> None:
        """Freeze when the ``occurrence``-th chunk from a client containing ``marker``
        arrives, before forwarding it (it is delivered at the thaw)."""
        self._armed = (marker, occurrence)
        self.froze = trio.Event()

    def _check_armed(self, data: bytes | bytearray) -> None:
        if self._armed is None or self._armed[0] not in data:
            return
        marker, left = self._armed
        if left > 1:
            self._armed = (marker, left - 1)
            return
        self._armed = None
        self.freeze()
        self.froze.set()

    def thaw(self) -> None:
        self._thawed.set()

    async def _handle(self, client: trio.SocketStream) -> None:
        self.connections += 1
        async with client, await trio.open_unix_socket(str(self._target)) as server:
            async with trio.open_nursery() as nursery:

                async def pump(
                    source: trio.abc.Stream, sink: trio.abc.Stream, upstream: bool
                ) -> None:
                    try:
                        while data := await source.receive_some(_CHUNK):
                            if upstream:
                                self._check_armed(data)
                            await self._thawed.wait()  # read before the freeze: held
                            if upstream and self._was_frozen:
                                self.sent_after_thaw += len(data)
                            await sink.send_all(data)
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
                    await self._thawed.wait()  # a close is not seen across a partition
                    nursery.cancel_scope.cancel()

                nursery.start_soon(pump, client, server, True)
                nursery.start_soon(pump, server, client, False)


@asynccontextmanager
async def open_freezable_proxy(target: Path) -> AsyncIterator[FreezableProxy]:
    """Serve on 127.0.0.1 (a free port) until the block ends, forwarding to the Unix
    socket ``target``; every connection is closed on exit."""
    proxy = FreezableProxy(target)
    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, proxy._handle, 0, host="127.0.0.1")
        listeners = await nursery.start(serve)
        proxy.port = listeners[0].socket.getsockname()[1]
        try:
            yield proxy
        finally:
            proxy.thaw()
            nursery.cancel_scope.cancel()
