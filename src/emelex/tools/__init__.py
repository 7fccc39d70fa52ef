"""Tools an agent can call: the tool protocol, built-in tools and their I/O layers."""

from emelex.tools._protocol import (
    MAX_PROGRESS_CHARS,
    AgentTool,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)
from emelex.tools._settings import BuiltinSettings

__all__ = [
    "MAX_PROGRESS_CHARS",
    "AgentTool",
    "BuiltinSettings",
    "ToolCancellationPolicy",
    "ToolInvocation",
    "ToolOutput",
]
