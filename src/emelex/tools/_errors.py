"""Errors of the tools layer, under one root :class:`ToolsError`: what a tool function
raises to shape its result, argument conversion, tool definitions and the shell."""

from __future__ import annotations

from emelex._errors import EmelexError


class ToolsError(EmelexError):
    """Root of every error the tools layer raises (MCP and workspace errors included)."""


class ToolError(ToolsError):
    """Raise inside a tool function to give the model an error result with exactly
    this message (other exceptions are reported as "tool ... failed: ...")."""


class RetryWithFeedback(ToolError):
    """Raise inside a tool to ask the model to try again: the model gets an error result
    with exactly this message (say what to change), and the call counts against the
    tool's and the turn's retry budgets. When a budget is spent the turn fails with
    :class:`~emelex.agent.RetryBudgetExhausted` instead of looping.

    Any :class:`~emelex.tools.AgentTool` may raise it from ``invoke``; a ``@tool``
    function simply raises it."""


class ArgumentConversionError(ToolsError, ValueError):
    """Call arguments satisfy the schema but cannot be converted to the declared types
    (or do not satisfy the schema when a tool is invoked outside a session)."""


class ShellError(ToolsError):
    """Base class of the errors raised by the shell runner."""


class ShellCommandRejected(ShellError):
    """The command or environment cannot be passed to a process (NUL bytes, bad values)."""


class ShellSpawnError(ShellError):
    """The process could not be started (missing working directory, exec failure)."""


class ShellCleanupError(ShellError):
    """The process tree did not exit even after ``SIGKILL`` (for example stuck in I/O)."""


class InvalidToolFunction(ToolsError, TypeError):
    """A function cannot become a tool: not ``async def``, generic, ``*args`` /
    ``**kwargs`` / positional-only parameters, a missing or unsupported annotation, a
    bad name or rename. Raised when the tool is declared, never during a turn."""


class UnsupportedAnnotation(InvalidToolFunction):
    """A type hint has no JSON Schema mapping (see :mod:`emelex.tools._schema`)."""


__all__ = [
    "InvalidToolFunction",
    "UnsupportedAnnotation",
    "ShellError",
    "ShellCommandRejected",
    "ShellSpawnError",
    "ShellCleanupError",
    "ArgumentConversionError",
    "RetryWithFeedback",
    "ToolError",
    "ToolsError",
]
