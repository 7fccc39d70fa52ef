"""Tools an agent can call: the tool protocol, built-in tools and their I/O layers."""

from emelex._facade import fix_module_names
from emelex.tools._context import ToolCallContext
from emelex.tools._definition import (
    TOOL_NAME,
    ArgumentValidator,
    tool_name_problem,
    tool_schema_problem,
)
from emelex.tools._errors import ArgumentConversionError, RetryWithFeedback, ToolError, ToolsError
from emelex.tools._function import FunctionTool, tool
from emelex.tools._protocol import (
    MAX_PROGRESS_CHARS,
    AgentTool,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)
from emelex.tools._schema import InvalidToolFunction, UnsupportedAnnotation, schema_for
from emelex.tools._settings import BuiltinSettings
from emelex.tools._signature import conversion_error, converter, register_typeddict
from emelex.tools.mcp import (
    McpConnection,
    McpError,
    McpServer,
    McpTool,
    open_mcp_connection,
    start_mcp_connection,
)

__all__ = [
    "ToolsError",
    "conversion_error",
    "converter",
    "register_typeddict",
    "schema_for",
    "McpConnection",
    "McpError",
    "McpServer",
    "McpTool",
    "open_mcp_connection",
    "start_mcp_connection",
    "TOOL_NAME",
    "ArgumentValidator",
    "tool_name_problem",
    "tool_schema_problem",
    "ArgumentConversionError",
    "FunctionTool",
    "InvalidToolFunction",
    "RetryWithFeedback",
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

fix_module_names(__name__, globals())
