"""An engine integration that connects each session to its agent's MCP servers."""

from __future__ import annotations

from emelex.app._engine import Contribution, IntegrationRequest
from emelex.app._errors import AppError
from emelex.runtime import Supervisor
from emelex.tools import AgentTool
from emelex.tools.mcp import McpConnection, McpServer, start_mcp_connection


class McpIntegration:
    """Opens one connection actor per MCP server of the agent when a session starts and
    closes them when it closes; the servers' tools join the session.

    The connections live in the current supervisor's nursery (they outlive the call that
    starts the session), so use it inside :func:`emelex.open_supervisor`. A server that
    cannot be reached fails the session start (connections opened before it are closed).
    """

    async def open(self, request: IntegrationRequest) -> Contribution:
        actors = Supervisor.current().actors
        connections: list[McpConnection] = []
        try:
            for server in request.agent.mcp_servers:
                if not isinstance(server, McpServer):
                    raise AppError(
                        f"MCP server {getattr(server, 'name', server)!r} is not an McpServer"
                    )
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
