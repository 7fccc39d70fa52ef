"""An engine integration that connects each session to its agent's MCP servers."""

from __future__ import annotations

from emelex.app._errors import AppError
from emelex.app._integration import Contribution, IntegrationRequest
from emelex.runtime import Supervisor
from emelex.tools import AgentTool
from emelex.tools.mcp import (
    McpConnection,
    McpServer,
    McpStdioDisabled,
    StdioTransport,
    start_mcp_connection,
)


def check_stdio_allowed(servers: tuple[object, ...], allow_stdio: bool) -> None:
    """Refuse the first stdio server unless the host enabled them (the ``mcp-stdio`` gate).

    Checked before any connection opens, so a refused agent starts no process at all.
    """
    if allow_stdio:
        return
    for server in servers:
        if isinstance(server, McpServer) and isinstance(server.transport, StdioTransport):
            raise McpStdioDisabled(
                "stdio MCP servers run local processes and are off by default: install "
                "emelex[mcp-stdio] and pass Engine(allow_stdio_servers=True) "
                "(or McpIntegration(allow_stdio=True))",
                server=server.name,
            )


class McpIntegration:
    """Opens one connection actor per MCP server of the agent when a session starts and
    closes them when it closes; the servers' tools join the session.

    The connections live in the current supervisor's nursery (they outlive the call that
    starts the session), so use it inside :func:`emelex.open_supervisor`. A server that
    cannot be reached fails the session start (connections opened before it are closed).
    Stdio servers (local processes, the ``mcp-stdio`` extra) are refused with
    :class:`~emelex.tools.mcp.McpStdioDisabled` unless ``allow_stdio=True``.
    """

    def __init__(self, *, allow_stdio: bool = False) -> None:
        if not isinstance(allow_stdio, bool):
            raise TypeError("allow_stdio must be True or False")
        self.allow_stdio = allow_stdio

    async def open(self, request: IntegrationRequest) -> Contribution:
        servers = request.agent.mcp_servers
        for server in servers:
            if not isinstance(server, McpServer):
                raise AppError(
                    f"MCP server {getattr(server, 'name', server)!r} is not an McpServer"
                )
        check_stdio_allowed(servers, self.allow_stdio)
        actors = Supervisor.current().actors
        connections: list[McpConnection] = []
        try:
            for server in servers:
                connections.append(await start_mcp_connection(actors, server))
        except BaseException:
            for connection in reversed(connections):
                await connection.aclose()
            raise
        tools: list[AgentTool] = [tool for c in connections for tool in c.tools()]
        warnings = [warning for c in connections for warning in c.warnings]

        async def close() -> None:
            for connection in reversed(connections):
                await connection.aclose()

        return Contribution(tools=tools, handles={"mcp_servers"}, close=close, warnings=warnings)
