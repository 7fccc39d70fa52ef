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

__all__ = [
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
