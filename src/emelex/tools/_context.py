"""What a tool function learns about the call it serves."""

from __future__ import annotations

from typing import Any

from emelex.runtime import AgentCancellation
from emelex.tools._protocol import ToolInvocation


class ToolCallContext:
    """What a tool function learns about the call it serves.

    Declare it as the first parameter of a ``@tool`` function (or use
    :meth:`FunctionTool.with_context`); it is injected and never appears in the schema.
    """

    __slots__ = ("_invocation",)

    def __init__(self, invocation: ToolInvocation) -> None:
        self._invocation = invocation

    @property
    def session_id(self) -> str:
        return self._invocation.session_id

    @property
    def turn_id(self) -> str:
        return self._invocation.turn_id

    @property
    def call_id(self) -> str:
        """The harness-issued id of this call (as in events, approvals and history)."""
        return self._invocation.call.id

    @property
    def tool_name(self) -> str:
        return self._invocation.call.name

    @property
    def arguments(self) -> dict[str, Any]:
        """The raw (validated, model-facing) JSON arguments of the call."""
        return self._invocation.arguments

    @property
    def approved(self) -> bool:
        """True when this exact call was approved by the session's approval policy."""
        return self._invocation.approved

    @property
    def cancellation(self) -> AgentCancellation:
        """Fires when the turn is cancelled; long-running tools should watch it."""
        return self._invocation.cancellation

    @property
    def invocation(self) -> ToolInvocation:
        return self._invocation

    async def progress(
        self, message: str, *, completed: int | None = None, total: int | None = None
    ) -> None:
        """Report progress; it reaches the session's events as ``ToolProgress``."""
        await self._invocation.progress(message, completed=completed, total=total)

    def __repr__(self) -> str:
        return (
            f"ToolCallContext(session_id={self.session_id!r}, turn_id={self.turn_id!r}, "
            f"call_id={self.call_id!r})"
        )


__all__ = ["ToolCallContext"]
