"""What a tool function raises to shape its result, and what argument conversion raises."""

from __future__ import annotations

from emelex._errors import EmelexError


class ToolError(EmelexError):
    """Raise inside a tool function to give the model an error result with exactly
    this message (other exceptions are reported as "tool ... failed: ...")."""


class RetryWithFeedback(ToolError):
    """Raise inside a tool to ask the model to try again: the model gets an error result
    with exactly this message (say what to change), and the call counts against the
    tool's and the turn's retry budgets. When a budget is spent the turn fails with
    :class:`~emelex.agent.RetryBudgetExhausted` instead of looping.

    Any :class:`~emelex.tools.AgentTool` may raise it from ``invoke``; a ``@tool``
    function simply raises it."""


class ArgumentConversionError(EmelexError, ValueError):
    """Call arguments satisfy the schema but cannot be converted to the declared types
    (or do not satisfy the schema when a tool is invoked outside a session)."""


__all__ = ["ArgumentConversionError", "RetryWithFeedback", "ToolError"]
