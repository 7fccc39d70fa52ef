"""One listener of the Host: hypercorn's HTTP/1.1 + WebSocket protocol, with a bound on
open connections.

hypercorn's own ``serve`` accepts without limit; here each accepted connection takes a
slot, and a connection beyond ``max_connections`` gets an immediate ``503`` with a typed
error body (``TooManyConnections``) and is closed, so idle sockets cannot starve the
Host of file descriptors. Idle connections are closed after hypercorn's
``keep_alive_timeout``. (Uses hypercorn's per-connection ``TCPServer``; the ``serve``
extra pins the hypercorn versions whose signature this matches.)
"""

from __future__ import annotations

import contextlib
import functools
import socket
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio.tcp_server import TCPServer
from hypercorn.trio.worker_context import WorkerContext
from hypercorn.utils import wrap_app

from emelex.service._errors import TooManyConnections
from emelex.service.transport._http import HostApp, error_body
from emelex.service.transport._json import dump
from emelex.service.transport._wsserver import is_websocket, read_head, serve_websocket

#: How long a connection whose peer closed its side may still finish an answer.
_AFTER_EOF_SECONDS = 1.0
#: How long a refused connection may take to receive its 503.
_REFUSE_SECONDS = 5.0
_REFUSE_READ_BYTES = 64 * 1024


def _refusal(limit: int) -> bytes:
    body = dump(
        error_body(TooManyConnections(f"the Host holds its maximum of {limit} connections"))
    )
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


async def _refuse(stream: trio.abc.Stream, limit: int) -> None:
    with trio.move_on_after(_REFUSE_SECONDS):
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            # Take (a bounded part of) the request first: a client still writing its
            # request when the answer and the close arrive may not read the answer.
            with trio.move_on_after(_REFUSE_SECONDS / 5):
                await stream.receive_some(_REFUSE_READ_BYTES)
            await stream.send_all(_refusal(limit))
    await trio.aclose_forcefully(stream)


class _Tracked:
    """A connection's stream that reports when hypercorn closed it (else transparent:
    hypercorn probes attributes such as ``do_handshake`` to tell TLS from plain)."""

    def __init__(self, stream: Any, prefix: bytes = b"") -> None:
        self._stream = stream
        self._prefix = prefix  # bytes already read from the stream, handed out first
        #: Set when hypercorn closed the stream.
        self.closed = trio.Event()
        #: Set when the stream was closed or the peer closed its side.
        self.ended = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            prefix, self._prefix = self._prefix, b""
            return prefix
        try:
            data: bytes = await self._stream.receive_some(max_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.ended.set()
            raise
        if not data:
            self.ended.set()
        return data

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            self.closed.set()
            self.ended.set()


async def _connection(app: Any, config: Config, worker: WorkerContext, stream: _Tracked) -> None:
    try:
        await TCPServer(app, config, worker, {}, stream)  # type: ignore[arg-type]
    finally:
        await stream.aclose()


async def serve_listener(
    app: HostApp,
    config: Config,
    sock: socket.socket,
    *,
    tls: bool,
    max_connections: int,
    shutdown: trio.Event,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept on ``sock`` (already listening) until ``shutdown``; then stop accepting and
    give open connections ``config.graceful_timeout`` to finish."""
    listener: trio.abc.Listener[Any] = trio.SocketListener(trio.socket.from_stdlib_socket(sock))
    if tls:
        context = config.create_ssl_context()
        assert context is not None  # the config names a certificate and key
        listener = trio.SSLListener(listener, context, https_compatible=True)
    wrapped = wrap_app(app, config.wsgi_max_body_size, "asgi")  # type: ignore[arg-type]
    worker = WorkerContext(None)
    active = 0

    async def handle(stream: Any) -> None:
        nonlocal active
        if active >= max_connections:
            await _refuse(stream, max_connections)
            return
        active += 1
        try:
            try:
                with trio.fail_after(config.keep_alive_timeout):
                    head = await read_head(stream)
            except (
                trio.TooSlowError,
                ValueError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
            ):
                head = b""  # idle, oversized or broken before a request: close it
            if not head:
                await trio.aclose_forcefully(stream)
                return
            if is_websocket(head):
                try:
                    await serve_websocket(app, stream, head, app.limits.max_ws_message)
                finally:
                    await trio.aclose_forcefully(stream)
                return
            tracked = _Tracked(stream, head)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_connection, wrapped, config, worker, tracked)
                # hypercorn keeps a connection's idle timer running after the peer left.
                # Once the peer has closed its side, a last answer may still be written
                # (a client that half-closes after its request): allow a moment for it,
                # then free the slot.
                await tracked.ended.wait()
                if not tracked.closed.is_set():
                    with trio.move_on_after(_AFTER_EOF_SECONDS):
                        await tracked.closed.wait()
                nursery.cancel_scope.cancel()
        finally:
            active -= 1

    async with trio.open_nursery() as connections:
        async with trio.open_nursery() as accepting:
            accepting.start_soon(
                functools.partial(
                    trio.serve_listeners, handle, [listener], handler_nursery=connections
                )
            )
            task_status.started()
            await shutdown.wait()
            accepting.cancel_scope.cancel()
        await worker.terminated.set()
        connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
