"""Tools an agent can call: the tool protocol, built-in tools and their I/O layers."""

from emelex.tools._function import (
    ArgumentConversionError,
    FunctionTool,
    InvalidToolFunction,
    ToolCallContext,
    ToolError,
    UnsupportedAnnotation,
    tool,
)
from emelex.tools._protocol import (
    MAX_PROGRESS_CHARS,
    AgentTool,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)
from emelex.tools._settings import BuiltinSettings
from emelex.tools.mcp import (
    McpConnection,
    McpError,
    McpServer,
    McpTool,
    open_mcp_connection,
    start_mcp_connection,
)

__all__ = [
    "McpConnection",
    "McpError",
    "McpServer",
    "McpTool",
    "open_mcp_connection",
    "start_mcp_connection",
    "ArgumentConversionError",
    "FunctionTool",
    "InvalidToolFunction",
    "ToolCallContext",
    "ToolError",
    "UnsupportedAnnotation",
    "tool",
    "MAX_PROGRESS_CHARS",
    "AgentTool",
    "BuiltinSettings",
    "ToolCancellationPolicy",
    "ToolInvocation",
    "ToolOutput",
]
