"""Everything that touches the ``mcp`` SDK (imported lazily by the connection).

The SDK is anyio-based and runs under Trio. Its transports and ``ClientSession`` open
task groups, so they are entered and exited by one task: the connection actor.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from typing import Any, TextIO, TypeAlias

import anyio
import httpx
import mcp.types as types
import pydantic
import trio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT
from mcp.shared.exceptions import McpError as SdkError
from mcp.shared.message import SessionMessage

from emelex._version import __version__
from emelex.tools._protocol import ToolOutput
from emelex.tools.mcp._asks import AskScopes
from emelex.tools.mcp._config import HttpTransport, McpServer, StdioTransport
from emelex.tools.mcp._content import ContentBuilder
from emelex.tools.mcp._errors import (
    McpConnectionFailed,
    McpError,
    McpProtocolError,
    McpServerClosed,
    McpTimeout,
    McpToolNotFound,
)
from emelex.tools.mcp._sdk_asks import callbacks
from emelex.tools.mcp._tool import RemoteTool

ReadStream: TypeAlias = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream: TypeAlias = MemoryObjectSendStream[SessionMessage]

#: Most ``tools/list`` pages followed during discovery.
MAX_LIST_PAGES = 64
_CLIENT_INFO = types.Implementation(name="emelex", version=__version__)


def resolve_command(transport: StdioTransport) -> str:
    """The absolute path of the server command (a bare name is looked up on PATH)."""
    if os.path.isabs(transport.command):
        return transport.command
    env = dict(transport.env or ())
    path = env.get("PATH", os.environ.get("PATH", os.defpath))
    found = shutil.which(transport.command, path=path)
    if found is None:
        raise FileNotFoundError(f"command {transport.command!r} not found on PATH")
    return os.path.abspath(found)


@contextlib.contextmanager
def _errlog(mode: str) -> Iterator[TextIO]:
    if mode == "inherit" and sys.__stderr__ is not None:
        yield sys.__stderr__
        return
    with open(os.devnull, "w", encoding="utf-8") as sink:
        yield sink


#: The SDK logs through ``mcp.*`` loggers, some with tracebacks (``logger.exception``).
#: With no handler configured, Python's last-resort handler would print them on the
#: user's terminal; a NullHandler keeps them in logging (they still propagate to the
#: host's handlers) and off stderr.
logging.getLogger("mcp").addHandler(logging.NullHandler())

OnLost: TypeAlias = Callable[[BaseException], None]


class _WatchedStream(httpx.AsyncByteStream):
    """A response body that reports a broken connection before the SDK swallows it."""

    def __init__(self, inner: httpx.AsyncByteStream, on_lost: OnLost) -> None:
        self._inner = inner
        self._on_lost = on_lost

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._inner:
                yield chunk
        except httpx.TransportError as exc:
            self._on_lost(exc)
            raise

    async def aclose(self) -> None:
        await self._inner.aclose()


class WatchedTransport(httpx.AsyncBaseTransport):
    """Reports POSTs that fail on the wire (refused, reset, cut mid-stream).

    The SDK's Streamable HTTP client logs a response stream that breaks mid-call at
    debug level and forgets the request: its caller would wait for the call timeout.
    This transport sees the error first and calls ``on_lost``, which fails the
    connection so every running call ends at once with ``McpServerClosed``.
    """

    def __init__(self, inner: httpx.AsyncBaseTransport, on_lost: OnLost) -> None:
        self._inner = inner
        self._on_lost = on_lost

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            response = await self._inner.handle_async_request(request)
        except httpx.PoolTimeout:
            raise  # our own pool is full: the server is not at fault
        except httpx.TransportError as exc:
            if request.method == "POST":
                self._on_lost(exc)
            raise
        if request.method == "POST" and isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _WatchedStream(response.stream, self._on_lost)
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def open_transport(
    server: McpServer, on_lost: OnLost | None = None
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """The SDK transport for ``server``: enter and exit it in one task.

    ``on_lost`` is called (from an SDK task) when an HTTP server stops answering on the
    wire; stdio transports report a dead process by closing their streams instead.
    """
    transport = server.transport
    if isinstance(transport, HttpTransport):
        read_timeout = MCP_DEFAULT_SSE_READ_TIMEOUT
        if server.call_timeout is not None:
            read_timeout = max(read_timeout, server.call_timeout + 30.0)
        wire: httpx.AsyncBaseTransport = httpx.AsyncHTTPTransport()
        if on_lost is not None:
            wire = WatchedTransport(wire, on_lost)
        client = httpx.AsyncClient(
            headers=dict(transport.headers) or None,
            timeout=httpx.Timeout(server.connect_timeout, read=read_timeout),
            transport=wire,
        )
        gate = PostGate()
        client.event_hooks = {"request": [gate.on_request], "response": []}
        async with client, streamable_http_client(transport.url, http_client=client) as streams:
            read, write, _session_id = streams
            inner_write, inner_read = anyio.create_memory_object_stream[SessionMessage](0)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(gate.pump, inner_read, write, server.connect_timeout)
                try:
                    yield read, inner_write
                finally:
                    inner_write.close()
                    nursery.cancel_scope.cancel()
        return
    parameters = StdioServerParameters(
        command=resolve_command(transport),
        args=list(transport.args),
        env=dict(transport.env) if transport.env is not None else None,
        cwd=transport.cwd,
    )
    with _errlog(transport.stderr) as errlog:
        async with stdio_client(parameters, errlog=errlog) as (read, write):
            yield read, write


class PostGate:
    """Works around a request mix-up in the SDK's Streamable HTTP client.

    The client's writer task (``post_writer``, mcp 1.x and 2.x alike) spawns one task
    per request from a closure over its loop variable. If it takes a second message
    before the first request's task has run, that task reads the second message: the
    first request is never sent and the second is POSTed twice (a lost call, and a tool
    run twice). So every message from the session passes through :meth:`pump`, which
    forwards a request and then waits until its POST reaches httpx (the request event
    hook sees the JSON-RPC id), i.e. until the task has read its own message, before it
    forwards anything else. Only the start of each POST is serialized; responses still
    stream concurrently. The wait is bounded, so an SDK that no longer needs this only
    loses ``bound`` seconds on a request that never gets POSTed.
    """

    def __init__(self) -> None:
        self._waiting: dict[object, trio.Event] = {}

    async def on_request(self, request: httpx.Request) -> None:
        if request.method != "POST" or not self._waiting:
            return
        try:
            body = json.loads(request.content)
        except Exception:  # a streamed or non-JSON body is not one of ours
            return
        if isinstance(body, dict):
            event = self._waiting.pop(body.get("id"), None)
            if event is not None:
                event.set()

    async def pump(
        self, inner: MemoryObjectReceiveStream[SessionMessage], outer: WriteStream, bound: float
    ) -> None:
        async with inner, outer:
            async for message in inner:
                root = message.message.root
                if not isinstance(root, types.JSONRPCRequest):
                    await outer.send(message)
                    continue
                posted = self._waiting[root.id] = trio.Event()
                try:
                    await outer.send(message)
                    with trio.move_on_after(bound):
                        await posted.wait()
                finally:
                    self._waiting.pop(root.id, None)


@contextlib.asynccontextmanager
async def open_session(
    server: McpServer, on_lost: OnLost | None = None, asks: AskScopes | None = None
) -> AsyncIterator[ClientSession]:
    """Transport plus ``ClientSession``, entered and exited by the calling task.

    Sampling and elicitation only through the handlers the server configuration names
    (run under ``asks``); never roots: a server cannot read the host's file system
    through this client (the SDK answers such requests with an error).
    """
    extra = callbacks(server, asks if asks is not None else AskScopes())
    async with (
        open_transport(server, on_lost) as (read, write),
        ClientSession(read, write, client_info=_CLIENT_INFO, **extra) as session,
    ):
        yield session


async def initialize(session: ClientSession) -> types.InitializeResult:
    return await session.initialize()


async def list_tools(session: ClientSession) -> tuple[list[RemoteTool], list[str]]:
    """Every tool the server lists (following pagination, bounded)."""
    tools: list[RemoteTool] = []
    warnings: list[str] = []
    cursor: str | None = None
    for _ in range(MAX_LIST_PAGES):
        params = types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None
        result = await session.list_tools(params=params)
        tools.extend(
            RemoteTool(tool.name, tool.description, tool.inputSchema) for tool in result.tools
        )
        cursor = result.nextCursor
        if cursor is None:
            return tools, warnings
    warnings.append(f"tool discovery stopped after {MAX_LIST_PAGES} pages")
    return tools, warnings


def next_request_id(session: ClientSession) -> int | None:
    """The JSON-RPC id the session gives its next request (None if the SDK hides it).

    Read synchronously right before sending, in the sending task: the SDK assigns the id
    before its first checkpoint. Used only to address ``notifications/cancelled``.
    """
    value = getattr(session, "_request_id", None)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


async def call_tool(
    session: ClientSession, name: str, arguments: Mapping[str, Any], limit: int
) -> ToolOutput:
    result = await session.call_tool(name, dict(arguments))
    return to_output(result, limit)


async def send_cancelled(session: ClientSession, request_id: int, reason: str) -> None:
    notification = types.CancelledNotification(
        params=types.CancelledNotificationParams(requestId=request_id, reason=reason)
    )
    await session.send_notification(types.ClientNotification(notification))


async def ping(session: ClientSession) -> None:
    await session.send_ping()


def to_output(result: types.CallToolResult, limit: int) -> ToolOutput:
    """Map a ``tools/call`` result to bounded content (``isError`` → an error result)."""
    builder = ContentBuilder(limit)
    for block in result.content:
        if isinstance(block, types.TextContent):
            builder.text(block.text)
        elif isinstance(block, types.ImageContent):
            builder.media("image", block.data, block.mimeType)
        elif isinstance(block, types.AudioContent):
            builder.media("audio", block.data, block.mimeType)
        elif isinstance(block, types.EmbeddedResource):
            _resource(builder, block.resource)
        elif isinstance(block, types.ResourceLink):
            label = f"resource link {block.uri}"
            if block.mimeType:
                label += f" ({block.mimeType})"
            if block.description:
                label += f": {block.description}"
            builder.note(label)
    if not result.content and result.structuredContent is not None:
        builder.text(json.dumps(result.structuredContent, ensure_ascii=False, sort_keys=True))
    return builder.build(result.isError)


def _resource(
    builder: ContentBuilder, resource: types.TextResourceContents | types.BlobResourceContents
) -> None:
    mime = resource.mimeType or ""
    if isinstance(resource, types.TextResourceContents):
        builder.note(f"resource {resource.uri}" + (f" ({mime})" if mime else ""))
        builder.text("\n" + resource.text)
        return
    if mime.startswith("image/"):
        builder.media("image", resource.blob, mime)
    elif mime.startswith("audio/"):
        builder.media("audio", resource.blob, mime)
    else:
        size = len(resource.blob) // 4 * 3
        builder.note(f"binary resource {resource.uri} ({mime or 'unknown type'}, ~{size} bytes)")


def map_error(exc: BaseException, server: str, what: str) -> McpError:
    """An emelex error for a failure of ``what`` (cause chained by the caller)."""
    if isinstance(exc, McpError):
        return exc
    if isinstance(exc, SdkError):
        code = exc.error.code
        if code == types.CONNECTION_CLOSED:
            return McpServerClosed(f"the connection closed during {what}", server=server)
        if code == httpx.codes.REQUEST_TIMEOUT:
            return McpTimeout(f"{what} timed out", server=server)
        message = str(exc.error.message)[:500]
        if code == types.METHOD_NOT_FOUND:
            return McpToolNotFound(f"{what}: {message}", server=server)
        return McpProtocolError(f"{what} failed: {message}", server=server, code=code)
    if isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | EOFError):
        return McpServerClosed(f"the connection is gone ({what})", server=server)
    if isinstance(exc, httpx.HTTPStatusError):
        status = exc.response.status_code
        return McpProtocolError(f"{what}: HTTP status {status}", server=server, code=status)
    if isinstance(exc, httpx.TransportError | OSError):
        return McpServerClosed(f"{what}: {type(exc).__name__}: {str(exc)[:300]}", server=server)
    if isinstance(exc, pydantic.ValidationError):
        return McpProtocolError(f"{what}: malformed answer from the server", server=server)
    if isinstance(exc, BaseExceptionGroup):
        leaves = list(_leaves(exc))
        if len(leaves) == 1:
            return map_error(leaves[0], server, what)
    return McpProtocolError(f"{what} failed: {type(exc).__name__}: {str(exc)[:300]}", server=server)


def connection_failure(exc: BaseException, server: str) -> McpConnectionFailed:
    """Describe why connecting failed, naming the innermost foreign errors."""
    leaves = list(_leaves(exc)) if isinstance(exc, BaseExceptionGroup) else [exc]
    summary = "; ".join(f"{type(leaf).__name__}: {str(leaf)[:300]}" for leaf in leaves[:3])
    return McpConnectionFailed(f"could not connect: {summary}", server=server)


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for inner in group.exceptions:
        if isinstance(inner, BaseExceptionGroup):
            yield from _leaves(inner)
        else:
            yield inner
