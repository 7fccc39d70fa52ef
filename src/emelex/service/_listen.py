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
from emelex.service._http import HostApp, error_body
from emelex.service._json import dump

#: How long a refused connection may take to receive its 503.
_REFUSE_SECONDS = 5.0


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
            await stream.send_all(_refusal(limit))
    await trio.aclose_forcefully(stream)


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
            await TCPServer(wrapped, config, worker, {}, stream)
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
