"""MCP servers as tool providers, through the official ``mcp`` SDK (which runs on Trio).

Configure a server with :meth:`McpServer.http` (Streamable HTTP; headers redacted from
``repr`` and never logged) or :meth:`McpServer.stdio` (a local process; the
``mcp-stdio`` extra; its command, arguments and environment are trusted host
configuration). :func:`open_mcp_connection` starts one connection actor that owns the
SDK session for its whole life and hands out the discovered tools as
:class:`~emelex.tools.AgentTool` objects.

The SDK itself is imported only when a connection opens: configurations can be built
and validated without it (install ``emelex[mcp]`` to connect).
"""

from emelex._facade import fix_module_names
from emelex.tools.mcp._asks import (
    ElicitAccept,
    ElicitationAnswer,
    ElicitationHandler,
    ElicitationRequest,
    ElicitCancel,
    ElicitDecline,
    SamplingHandler,
    SamplingMessage,
    SamplingRequest,
    SamplingResult,
)
from emelex.tools.mcp._config import (
    DEFAULT_ASK_TIMEOUT,
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_LIVENESS_TIMEOUT,
    DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_MAX_TOOLS,
    DEFAULT_SHUTDOWN_TIMEOUT,
    HttpTransport,
    McpServer,
    StdioTransport,
    Transport,
)
from emelex.tools.mcp._connection import (
    ACTOR_KIND,
    McpConnection,
    McpServerInfo,
    open_mcp_connection,
    start_mcp_connection,
)
from emelex.tools.mcp._errors import (
    InvalidMcpConfig,
    McpAskRefused,
    McpConnectionFailed,
    McpError,
    McpProtocolError,
    McpServerClosed,
    McpStdioDisabled,
    McpTimeout,
    McpToolNotFound,
    McpUnavailable,
)
from emelex.tools.mcp._tool import McpTool

__all__ = [
    "ACTOR_KIND",
    "DEFAULT_ASK_TIMEOUT",
    "ElicitAccept",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "ElicitCancel",
    "ElicitDecline",
    "McpAskRefused",
    "SamplingHandler",
    "SamplingMessage",
    "SamplingRequest",
    "SamplingResult",
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_LIVENESS_TIMEOUT",
    "DEFAULT_MAX_RESULT_BYTES",
    "DEFAULT_MAX_TOOLS",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "HttpTransport",
    "InvalidMcpConfig",
    "McpConnection",
    "McpConnectionFailed",
    "McpError",
    "McpProtocolError",
    "McpServer",
    "McpServerClosed",
    "McpServerInfo",
    "McpStdioDisabled",
    "McpTimeout",
    "McpTool",
    "McpToolNotFound",
    "McpUnavailable",
    "StdioTransport",
    "Transport",
    "open_mcp_connection",
    "start_mcp_connection",
]

fix_module_names(__name__, globals())
