"""A Unix-socket endpoint serving actor-tree snapshots as newline-delimited JSON.

Protocol: a client sends one command per line and gets one JSON object per line.
``snapshot`` answers the whole tree; ``ping`` answers ``{"ok": true}``. Anything else
answers ``{"error": ...}``. Snapshots are taken only on request, so an idle client
costs nothing; at most ``max_clients`` are served at once (more get ``busy``), and a
request line longer than ``MAX_REQUEST_BYTES`` closes the connection.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket as stdlib_socket
import stat
from typing import TYPE_CHECKING, Any

import trio

from emelex.runtime._actor import ActorKind
from emelex.runtime._context import ActorContext

if TYPE_CHECKING:
    from emelex.runtime._nursery import ActorHandle
    from emelex.runtime._supervisor import Supervisor

MAX_REQUEST_BYTES = 256
PROTOCOL_VERSION = 1


def _encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode() + b"\n"


def _answer(supervisor: Supervisor, command: str) -> dict[str, Any]:
    if command == "snapshot":
        return {"protocol": PROTOCOL_VERSION, "pid": os.getpid(), **_tree(supervisor)}
    if command == "ping":
        return {"protocol": PROTOCOL_VERSION, "ok": True}
    return {"protocol": PROTOCOL_VERSION, "error": f"unknown command {command[:40]!r}"}


def _tree(supervisor: Supervisor) -> dict[str, Any]:
    return supervisor.snapshot().to_json_dict()


async def _serve_client(
    supervisor: Supervisor, stream: trio.SocketStream, limiter: trio.CapacityLimiter
) -> None:
    async with stream:
        try:
            limiter.acquire_nowait()
        except trio.WouldBlock:
            await stream.send_all(_encode({"protocol": PROTOCOL_VERSION, "error": "busy"}))
            return
        try:
            buffer = b""
            while True:
                data = await stream.receive_some(MAX_REQUEST_BYTES)
                if not data:
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    command = line.decode("utf-8", "replace").strip()
                    await stream.send_all(_encode(_answer(supervisor, command)))
                if len(buffer) > MAX_REQUEST_BYTES:
                    await stream.send_all(
                        _encode({"protocol": PROTOCOL_VERSION, "error": "request too long"})
                    )
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            limiter.release()


async def serve_diagnostics(
    supervisor: Supervisor,
    path: str | os.PathLike[str],
    *,
    max_clients: int = 8,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``supervisor`` snapshots on the Unix socket ``path`` until cancelled.

    Use with ``await nursery.start(serve_diagnostics, supervisor, path)``: startup errors
    (path in use by a non-socket, permission) surface there, and ``started`` reports the
    bound path. A stale socket file at ``path`` is replaced; the file is removed on exit.
    The socket is created with mode 0600 (owner only).
    """
    path_text = os.fspath(path)
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(os.lstat(path_text).st_mode):
            raise FileExistsError(f"{path_text} exists and is not a socket")
        os.unlink(path_text)
    sock = trio.socket.socket(stdlib_socket.AF_UNIX, stdlib_socket.SOCK_STREAM)
    old_umask = os.umask(0o177)
    try:
        await sock.bind(path_text)
    finally:
        os.umask(old_umask)
    sock.listen(max_clients)
    listener = trio.SocketListener(sock)
    limiter = trio.CapacityLimiter(max_clients)
    try:
        async with listener, trio.open_nursery() as nursery:
            task_status.started(path_text)
            while True:
                stream = await listener.accept()
                nursery.start_soon(_serve_client, supervisor, stream, limiter)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path_text)


#: Set to a socket path to make the first supervisor of a process serve diagnostics there
#: (``emelex supervise -- PROGRAM`` sets it for the program it starts).
DIAGNOSTICS_ENV = "EMELEX_DIAGNOSTICS_SOCKET"
_env_diagnostics_claimed = False


async def start_env_diagnostics(supervisor: Supervisor) -> ActorHandle | None:
    """Serve ``supervisor`` on the socket named by :data:`DIAGNOSTICS_ENV`, as a service
    actor, if this is the first supervisor of the process to ask (None otherwise)."""
    global _env_diagnostics_claimed
    path = os.environ.get(DIAGNOSTICS_ENV)
    if not path or _env_diagnostics_claimed:
        return None
    _env_diagnostics_claimed = True

    async def serve(ctx: ActorContext) -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_diagnostics, supervisor, path)
            ctx.started()

    return await supervisor.actors.start(serve, kind=ActorKind.SERVICE, name="diagnostics")
