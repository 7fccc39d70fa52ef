"""A child turn run as part of a tool call (a sub-agent): how its end is classified and
how the call's cancellation reaches it.

The child turn is awaited in the calling tool's task, so its actors are registered
below the tool's actor and the parent turn's no-detached-work check covers them.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias

import attrs
import trio

from emelex.agent._errors import AgentError
from emelex.agent._turn_core import AgentTurn
from emelex.runtime import AgentCancellation
from emelex.tools import ToolInvocation

NestedOutcome: TypeAlias = Literal["completed", "failed", "cancelled", "timed_out"]


@attrs.frozen
class NestedTurn:
    """How a child turn ended: its committed ``turn`` (``"completed"``), or the error
    it raised (``"failed"``, ``"cancelled"``: the parent call's cancellation reached it),
    or nothing (``"timed_out"``: it was cancelled at its deadline)."""

    outcome: NestedOutcome
    turn: AgentTurn | None = None
    error: AgentError | None = None

    def describe(self) -> str:
        """One line for the parent's tool result when the child did not complete."""
        if self.outcome == "timed_out":
            return "sub-agent timed out"
        what = "cancelled" if self.outcome == "cancelled" else "failed"
        detail = "" if self.error is None else f": {type(self.error).__name__}: {self.error}"
        return f"sub-agent {what}{detail}"


async def run_nested_turn(
    run: Callable[[AgentCancellation], Awaitable[AgentTurn]],
    invocation: ToolInvocation,
    *,
    time_limit: float | None = None,
) -> NestedTurn:
    """Await ``run(cancellation)`` (one child turn) for the tool call ``invocation``.

    The call's ``invocation.cancellation`` cancels the child's cancellation (so the
    child ends by its own rules: tools under their policies, history resolved) and the
    child's :class:`AgentError` becomes the ``"failed"``/``"cancelled"`` outcome. Past
    ``time_limit`` seconds the child's scope is cancelled: ``"timed_out"``. Checkpoints;
    a cancelled caller scope propagates ``trio.Cancelled`` once the child has ended."""
    cancellation = AgentCancellation()
    remove = invocation.cancellation.add_callback(cancellation.cancel)
    try:
        with trio.move_on_after(math.inf if time_limit is None else time_limit):
            try:
                return NestedTurn("completed", await run(cancellation))
            except AgentError as exc:
                outcome: NestedOutcome = "cancelled" if cancellation.cancelled else "failed"
                return NestedTurn(outcome, error=exc)
        return NestedTurn("timed_out")
    finally:
        remove()


__all__ = ["NestedOutcome", "NestedTurn", "run_nested_turn"]
