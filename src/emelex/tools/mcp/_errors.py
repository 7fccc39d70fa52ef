"""The MCP error subtree. Foreign errors (OS, HTTP, the SDK's own) are chained as causes."""

from __future__ import annotations

from emelex.tools._errors import ToolsError


class McpError(ToolsError):
    """Base of every error :mod:`emelex.tools.mcp` raises. ``server`` names the server
    configuration it concerns (None when the configuration itself is the problem)."""

    def __init__(self, message: str, *, server: str | None = None) -> None:
        self.server = server
        super().__init__(message if server is None else f"MCP server {server!r}: {message}")


class InvalidMcpConfig(McpError):
    """An :class:`McpServer` configuration was refused (name, URL, headers, command, ...)."""


class McpUnavailable(McpError):
    """The ``mcp`` SDK is not installed: install ``emelex[mcp]`` (or ``emelex[mcp-stdio]``)."""


class McpStdioDisabled(McpUnavailable):
    """A stdio server was refused: local processes are a separate gate. Install
    ``emelex[mcp-stdio]`` and enable them explicitly (``Engine(allow_stdio_servers=True)``
    or ``McpIntegration(allow_stdio=True)``)."""


class McpConnectionFailed(McpError):
    """The server could not be started or reached, or failed its handshake or discovery."""


class McpProtocolError(McpError):
    """The server answered with a JSON-RPC error or with data that breaks the protocol.

    ``code`` is the JSON-RPC error code when the server sent one.
    """

    def __init__(self, message: str, *, server: str | None = None, code: int | None = None) -> None:
        self.code = code
        super().__init__(message, server=server)


class McpServerClosed(McpError):
    """The connection is closed (by the host, or because the server went away)."""


class McpToolNotFound(McpError):
    """The named tool is not among the tools the server advertised (or was dropped)."""


class McpTimeout(McpError):
    """A request to the server did not finish within its configured time."""


class McpAskRefused(McpError):
    """A sampling handler refused a server's request to generate (``reason`` says why;
    the server receives it as an error)."""
