"""One MCP server connection = one actor that owns the SDK session from start to end.

The SDK's transports and ``ClientSession`` open task groups (Trio nurseries): they
must be entered and exited by the same task, or Trio (like asyncio frameworks before
it) fails with "exit cancel scope in a different task". So the connection actor's own
task enters the transport and the session, discovers the tools, reports ready through
the ``nursery.start()`` handshake, then serves requests from a bounded mailbox until
the connection closes, and exits both in that same task. Callers in any task put a
request in the mailbox and wait on its own completion event.
"""

from __future__ import annotations

import enum
import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from emelex.runtime import (
    ActorContext,
    ActorNursery,
    AgentCancellation,
    Mailbox,
    MailboxClosed,
    Supervisor,
    current_actor,
    open_unwrapping_nursery,
)
from emelex.tools._protocol import ToolOutput
from emelex.tools.mcp._asks import AskScopes
from emelex.tools.mcp._config import HttpTransport, McpServer, StdioTransport
from emelex.tools.mcp._errors import (
    McpConnectionFailed,
    McpError,
    McpServerClosed,
    McpTimeout,
    McpToolNotFound,
    McpUnavailable,
)
from emelex.tools.mcp._tool import McpTool, accept_tools

if TYPE_CHECKING:
    from mcp import ClientSession

_log = logging.getLogger("emelex.tools.mcp")

#: The actor kind of a connection actor in supervisor snapshots.
ACTOR_KIND: Final = "mcp_server"
#: How long the actor spends telling a server that a request was cancelled.
CANCEL_NOTIFY_TIMEOUT: Final = 2.0
#: Most warnings kept on a connection.
MAX_WARNINGS: Final = 200


class _ServerDefault(enum.Enum):
    TOKEN = "the server's call_timeout"


#: Default of ``call_timeout=`` in :meth:`McpConnection.call_tool`: the server's setting.
SERVER_DEFAULT: Final = _ServerDefault.TOKEN


class _CallCancelled(McpError):
    """The invocation's AgentCancellation fired while the call was running."""


Operation = Callable[["ClientSession", "_Request"], Awaitable[Any]]


class _Request:
    """One request travelling through the mailbox, with its own completion event.

    The caller owns ``done`` (it waits on it); the actor owns ``scope`` while the request
    runs. ``abandon`` (caller side, any time) finishes the request with an error and
    cancels the actor's scope for it, so a dropped caller never leaves work running.
    """

    __slots__ = ("done", "error", "label", "operation", "request_id", "scope", "timeout", "value")

    def __init__(self, operation: Operation, label: str, timeout: float | None) -> None:
        self.operation = operation
        self.label = label
        self.timeout = timeout
        self.done = trio.Event()
        self.value: Any = None
        self.error: McpError | None = None
        self.scope: trio.CancelScope | None = None
        self.request_id: int | None = None

    def finish(self, value: Any = None, error: McpError | None = None) -> None:
        if self.done.is_set():
            return
        self.value, self.error = value, error
        self.done.set()

    def abandon(self, error: McpError) -> None:
        self.finish(error=error)
        if self.scope is not None:
            self.scope.cancel()


@attrs.frozen
class McpServerInfo:
    """What the server said about itself in the handshake (server-controlled text)."""

    name: str
    version: str
    protocol_version: str
    instructions: str | None


class McpConnection:
    """A live connection to one MCP server; safe to use from any task.

    Get one from :func:`open_mcp_connection`. ``tools()`` returns the discovered tools
    as :class:`AgentTool` objects; ``warnings`` lists the tools that were dropped (invalid
    names or schemas) and other discovery notes.
    """

    def __init__(self, server: McpServer, mailbox: Mailbox[_Request]) -> None:
        self.server = server
        self._mailbox = mailbox
        self._tools: dict[str, McpTool] = {}
        self._by_remote: dict[str, McpTool] = {}
        self._warnings: list[str] = []
        self._failure: McpError | None = None
        self._closing = False
        self._serving: trio.CancelScope | None = None
        self._ended = trio.Event()
        self.server_info = McpServerInfo("", "", "", None)
        #: The server's questions and generations now being answered.
        self.asks = AskScopes()

    # -- public ----------------------------------------------------------------------
    @property
    def warnings(self) -> tuple[str, ...]:
        return tuple(self._warnings)

    @property
    def closed(self) -> bool:
        """True once the connection was closed or the server went away."""
        return self._closing or self._failure is not None

    @property
    def failure(self) -> McpError | None:
        """Why the connection ended on its own (the server went away), if it did."""
        return self._failure

    def tools(self) -> list[McpTool]:
        """The discovered tools, in the server's order."""
        return list(self._tools.values())

    def tool(self, name: str) -> McpTool:
        """The tool offered under ``name`` (prefixed when the server config says so)."""
        try:
            return self._tools[name]
        except KeyError:
            raise McpToolNotFound(f"no tool {name!r}", server=self.server.name) from None

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        call_timeout: float | _ServerDefault | None = SERVER_DEFAULT,
    ) -> ToolOutput:
        """Call the server's tool ``name`` (its own, unprefixed name) directly.

        Returns the mapped result (``is_error`` when the tool reported an error). Raises
        :class:`McpToolNotFound` for a tool that was not discovered (or was dropped),
        :class:`McpTimeout`, :class:`McpServerClosed` or :class:`McpProtocolError`.
        ``call_timeout`` overrides the server's (None: no bound). Cancelling
        the caller cancels the request on the server and leaves the connection usable.
        """
        if name not in self._by_remote:
            raise McpToolNotFound(f"no tool {name!r}", server=self.server.name)
        if isinstance(call_timeout, _ServerDefault):
            call_timeout = self.server.call_timeout
        return await self._call(name, arguments or {}, None, call_timeout)

    async def aclose(self) -> None:
        """Close the connection and wait until its actor has ended (idempotent; any task).

        Running calls end with :class:`McpServerClosed`; the actor closes the session and
        transport within ``shutdown_timeout``. Needed only for connections started with
        :func:`start_mcp_connection`; :func:`open_mcp_connection` closes on exit.
        """
        self._request_close()
        await self._ended.wait()

    async def ping(self) -> None:
        """Round-trip a ``ping`` through the connection (bounded by ``call_timeout``)."""

        async def operation(session: ClientSession, request: _Request) -> None:
            request.request_id = self._sdk().next_request_id(session)
            await self._sdk().ping(session)

        await self._submit(operation, "ping", self.server.call_timeout, None)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<McpConnection {self.server.name!r} {state} tools={len(self._tools)}>"

    # -- used by McpTool -------------------------------------------------------------
    async def _call_tool(
        self, name: str, arguments: Mapping[str, Any], cancellation: AgentCancellation | None
    ) -> ToolOutput:
        try:
            return await self._call(name, arguments, cancellation, self.server.call_timeout)
        except _CallCancelled:
            return ToolOutput.error(
                f"cancelled: the call of MCP tool {name!r} was cancelled and the server "
                "was asked to stop; its effects are unknown"
            )
        except McpTimeout as exc:
            return ToolOutput.error(f"{exc}; the server was asked to stop; effects unknown")

    # -- internals -------------------------------------------------------------------
    @staticmethod
    def _sdk() -> ModuleType:
        from emelex.tools.mcp import _sdk

        return _sdk

    async def _call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        cancellation: AgentCancellation | None,
        seconds: float | None,
    ) -> ToolOutput:
        sdk = self._sdk()
        limit = self.server.max_result_bytes

        async def operation(session: ClientSession, request: _Request) -> ToolOutput:
            request.request_id = sdk.next_request_id(session)
            output: ToolOutput = await sdk.call_tool(session, name, arguments, limit)
            return output

        result: ToolOutput = await self._submit(
            operation, f"the call of tool {name!r}", seconds, cancellation
        )
        return result

    def _closed_error(self) -> McpServerClosed:
        error = McpServerClosed("the connection is closed", server=self.server.name)
        error.__cause__ = self._failure
        return error

    async def _submit(
        self,
        operation: Operation,
        label: str,
        seconds: float | None,
        cancellation: AgentCancellation | None,
    ) -> Any:
        if self.closed:
            raise self._closed_error()
        request = _Request(operation, label, seconds)
        try:
            await self._mailbox.put(request)
        except MailboxClosed as exc:
            raise self._closed_error() from exc
        remove = None
        if cancellation is not None:

            def cancel() -> None:
                request.abandon(_CallCancelled(f"{label} was cancelled", server=self.server.name))
                self.asks.cancel_all()

            remove = cancellation.add_callback(cancel)
        try:
            await request.done.wait()
        finally:
            if remove is not None:
                remove()
            if not request.done.is_set():
                # The caller was cancelled (Trio): drop the request; the actor tells the
                # server. Nothing waits for that here.
                request.abandon(McpServerClosed(f"{label} was abandoned", server=self.server.name))
                self.asks.cancel_all()
        if request.error is not None:
            raise request.error
        return request.value

    def _warn(self, text: str) -> None:
        if len(self._warnings) < MAX_WARNINGS:
            self._warnings.append(text)
        _log.warning("MCP server %r: %s", self.server.name, text)

    def _fail(self, error: McpError) -> None:
        if self._failure is None and not self._closing:
            self._failure = error
            _log.warning("MCP server %r: connection lost: %s", self.server.name, error)
        self._stop_serving()

    def _request_close(self) -> None:
        self._closing = True
        self._stop_serving()

    def _stop_serving(self) -> None:
        # Queued requests are failed by the actor (drain); running ones are cancelled
        # here, so closing never waits for a slow call (or for a free concurrency slot).
        self._mailbox.close()
        if self._serving is not None:
            self._serving.cancel()


def _load_sdk(server: McpServer) -> ModuleType:
    try:
        sdk = importlib.import_module("emelex.tools.mcp._sdk")
    except ImportError as exc:
        extra = "mcp-stdio" if isinstance(server.transport, StdioTransport) else "mcp"
        raise McpUnavailable(
            f"the 'mcp' SDK is not installed: install emelex[{extra}]", server=server.name
        ) from exc
    return sdk


@asynccontextmanager
async def open_mcp_connection(server: McpServer) -> AsyncIterator[McpConnection]:
    """Connect to ``server`` and keep the connection open for the block.

    Starts one connection actor (kind ``"mcp_server"``) under
    :meth:`Supervisor.current`, as a child of the calling task's actor. The actor starts
    the transport (spawns the process, or opens the HTTP client), runs the MCP handshake
    and tool discovery within ``connect_timeout``, and only then does this return; any
    failure before that raises :class:`McpConnectionFailed` (cause chained). Leaving the
    block closes the connection: in-flight calls end with :class:`McpServerClosed`, and
    the actor's own task closes the session and the transport within
    ``shutdown_timeout``, shielded from cancellation (a stdio server gets its stdin
    closed, 2 s to exit, then its process group is terminated; if the bound runs out
    first, the process is killed).

    Enter and exit the block in one task (it holds a nursery); use the connection and its
    tools from any task inside it. Errors of the block propagate unwrapped.
    """
    async with open_unwrapping_nursery() as nursery:
        actors = ActorNursery(Supervisor.current(), current_actor(), nursery)
        connection = await start_mcp_connection(actors, server)
        try:
            yield connection
        finally:
            connection._request_close()


async def start_mcp_connection(actors: ActorNursery, server: McpServer) -> McpConnection:
    """Start a connection actor for ``server`` in ``actors`` and return once it is ready.

    For owners whose open and close are separate calls (an engine integration, a
    long-lived service): the actor lives in the given actor nursery (for example
    ``supervisor.actors`` inside :func:`open_supervisor`) and ends after
    :meth:`McpConnection.aclose`, or when that nursery is cancelled. Same handshake and
    errors as :func:`open_mcp_connection`.
    """
    if not isinstance(server, McpServer):
        raise TypeError(f"expected an McpServer, got {type(server).__name__}")
    sdk = _load_sdk(server)
    handle = await actors.start(
        _connection_actor,
        server,
        sdk,
        kind=ACTOR_KIND,
        name=server.name,
        mailbox=server.mailbox,
    )
    connection: McpConnection = handle.value
    return connection


async def _connection_actor(ctx: ActorContext, server: McpServer, sdk: ModuleType) -> None:
    connection = McpConnection(server, ctx.mailbox)
    started = False

    def on_lost(exc: BaseException) -> None:
        # The wire broke under a request: fail the connection now (running calls end
        # with McpServerClosed) rather than let them wait for their call timeout.
        if started:
            error = sdk.map_error(exc, server.name, "the connection")
            error.__cause__ = exc
            connection._fail(error)

    failure: Exception | None = None
    # ``guard`` spans the whole life of the SDK contexts. While they close it is shielded
    # (so closing runs even when the owner was cancelled) and bounded by
    # ``shutdown_timeout`` (after which the SDK's cleanup is cancelled: it kills the
    # process). The contexts are entered and exited right here, in this task.
    try:
        with trio.CancelScope() as guard:
            try:
                async with sdk.open_session(server, on_lost, connection.asks) as session:
                    try:
                        with trio.fail_after(server.connect_timeout):
                            init = await sdk.initialize(session)
                            listed, notes = await sdk.list_tools(session)
                        _ready(connection, init, listed, notes)
                        started = True
                        ctx.started(connection)
                        await _serve(ctx, session, connection, sdk)
                    except Exception as exc:
                        failure = exc  # kept even if a forced close replaces it below
                        raise
                    finally:
                        guard.shield = True
                        guard.deadline = trio.current_time() + server.shutdown_timeout
            except Exception as exc:
                # The SDK's task groups wrap what crosses them in exception groups.
                failure = failure or exc
        if guard.cancelled_caught:
            _log.warning(
                "MCP server %r did not close within %g s; its transport was cancelled",
                server.name,
                server.shutdown_timeout,
            )
        if not started:
            if failure is None or isinstance(_only_leaf(failure), trio.TooSlowError):
                raise McpConnectionFailed(
                    f"no handshake and tool discovery within {server.connect_timeout:g} s",
                    server=server.name,
                ) from failure
            raise sdk.connection_failure(failure, server.name) from failure
        if failure is not None:
            # The server went away or the transport broke: later calls see McpServerClosed.
            error = sdk.map_error(failure, server.name, "the connection")
            if error is not failure:
                error.__cause__ = failure
            connection._fail(error)
    finally:
        _drain(connection, ctx.mailbox)
        connection._ended.set()


def _ready(connection: McpConnection, init: Any, listed: list[Any], notes: list[str]) -> None:
    server = connection.server
    info = init.serverInfo
    connection.server_info = McpServerInfo(
        name=str(info.name),
        version=str(info.version),
        protocol_version=str(init.protocolVersion),
        instructions=init.instructions,
    )
    accepted, warnings = accept_tools(server, listed)
    for note in [*notes, *warnings]:
        connection._warn(note)
    for remote, definition in accepted:
        tool = McpTool(connection, remote.name, definition)
        connection._tools[definition.name] = tool
        connection._by_remote[remote.name] = tool


async def _serve(
    ctx: ActorContext, session: ClientSession, connection: McpConnection, sdk: ModuleType
) -> None:
    limiter = trio.CapacityLimiter(connection.server.max_concurrent_calls)
    server = connection.server
    async with trio.open_nursery() as handlers:
        connection._serving = handlers.cancel_scope
        if connection.closed:  # closed while it was starting
            handlers.cancel_scope.cancel()
        if isinstance(server.transport, HttpTransport) and server.liveness_timeout is not None:
            busy = lambda: limiter.borrowed_tokens > 0  # noqa: E731
            handlers.start_soon(_watch_liveness, session, connection, sdk, busy)
        async for request in ctx.mailbox:
            if connection.closed:
                request.finish(error=connection._closed_error())
                continue
            try:
                await limiter.acquire_on_behalf_of(request)
            except BaseException:
                # Taken from the mailbox but never started: nobody else will finish it.
                request.finish(error=connection._closed_error())
                raise
            handlers.start_soon(_handle, session, request, limiter, connection, sdk)
        # Closed: whatever still runs is cut short (its caller gets McpServerClosed).
        handlers.cancel_scope.cancel()


async def _watch_liveness(
    session: ClientSession,
    connection: McpConnection,
    sdk: ModuleType,
    busy: Callable[[], bool],
) -> None:
    """While calls run, ping the server every half liveness period, each ping bounded by
    the other half: a server that stopped answering (hung, or its host gone without
    closing the TCP connection) fails the connection within ``liveness_timeout``.
    Idle connections are not pinged (nothing waits on them)."""
    server = connection.server
    assert server.liveness_timeout is not None
    half = server.liveness_timeout / 2
    while True:
        await trio.sleep(half)
        if not busy():
            continue
        with trio.move_on_after(half) as scope:
            try:
                await sdk.ping(session)
            except Exception as exc:
                error = sdk.map_error(exc, server.name, "a liveness ping")
                if error is not exc:
                    error.__cause__ = exc
                connection._fail(error)
                return
        if scope.cancelled_caught:
            connection._fail(
                McpServerClosed(
                    f"the server answered no ping within {server.liveness_timeout:g} s "
                    "while a call was running",
                    server=server.name,
                )
            )
            return


async def _handle(
    session: ClientSession,
    request: _Request,
    limiter: trio.CapacityLimiter,
    connection: McpConnection,
    sdk: ModuleType,
) -> None:
    server = connection.server.name
    try:
        if request.done.is_set():
            return  # abandoned while it waited in the mailbox
        with trio.CancelScope() as scope:
            request.scope = scope
            if request.timeout is not None:
                scope.deadline = trio.current_time() + request.timeout
            try:
                value = await request.operation(session, request)
            except Exception as exc:
                error = sdk.map_error(exc, server, request.label)
                if error is not exc:
                    error.__cause__ = exc
                request.finish(error=error)
                if isinstance(error, McpServerClosed):
                    connection._fail(error)
            else:
                request.finish(value)
        if scope.cancelled_caught:
            if request.timeout is not None and not request.done.is_set():
                request.finish(
                    error=McpTimeout(
                        f"{request.label} did not finish within {request.timeout:g} s",
                        server=server,
                    )
                )
            await _notify_cancelled(session, request, sdk)
    finally:
        request.scope = None
        limiter.release_on_behalf_of(request)
        request.finish(
            error=McpServerClosed(f"{request.label} ended with the connection", server=server)
        )


async def _notify_cancelled(session: ClientSession, request: _Request, sdk: ModuleType) -> None:
    """Tell the server a request was cancelled (MCP ``notifications/cancelled``).

    Harmless if the request never reached the server: the spec lets it ignore unknown
    ids. Bounded; a failure here only means the server may finish the work unobserved.
    """
    if request.request_id is None:
        return
    with trio.move_on_after(CANCEL_NOTIFY_TIMEOUT):
        try:
            await sdk.send_cancelled(session, request.request_id, f"{request.label} was cancelled")
        except Exception as exc:
            _log.debug("could not send a cancellation notification: %r", exc)


def _drain(connection: McpConnection, mailbox: Mailbox[_Request]) -> None:
    """Close the mailbox and fail every request still queued in it."""
    mailbox.close()
    while True:
        try:
            request = mailbox.get_nowait()
        except (trio.WouldBlock, MailboxClosed):
            return
        request.finish(error=connection._closed_error())


def _only_leaf(exc: BaseException) -> BaseException:
    """The single exception inside nested one-member groups (or ``exc`` itself)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
