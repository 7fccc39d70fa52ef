"""A scripted sub-agent tool: each call runs one turn of a child session with its own
scripted model and tools, the way ``Agent.as_tool`` does (through the same
:func:`~emelex.agent.run_nested_turn`), for the cancellation suite and your tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from emelex.agent import (
    AgentCancellation,
    AgentSession,
    AgentTool,
    AgentTurn,
    ApprovalLink,
    ApprovalPolicy,
    ChainedApproval,
    NestedOutcome,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
    run_nested_turn,
)
from emelex.model import Message, ToolDefinition
from emelex.testing._scripted import ScriptedModel, Step


@attrs.define
class ScriptedSubAgent:
    """An :class:`~emelex.agent.AgentTool` whose every call runs one child turn: a new
    :class:`~emelex.agent.AgentSession` in ``workspace`` on a fresh
    ``ScriptedModel(rounds)`` with ``tools``, its approvals asked of ``approvals``
    with the call in the chain. Each call's child history and outcome are recorded
    (``histories``, ``outcomes``) once the child turn has ended."""

    name: str
    rounds: Sequence[Sequence[Step]]
    tools: Sequence[AgentTool]
    approvals: ApprovalPolicy
    workspace: str
    policy: ToolCancellationPolicy = ToolCancellationPolicy.FINISH_ONCE_STARTED
    histories: list[tuple[Message, ...]] = attrs.field(factory=list)
    outcomes: list[NestedOutcome] = attrs.field(factory=list)

    @property
    def definition(self) -> ToolDefinition:
        schema = {"type": "object", "properties": {}, "additionalProperties": True}
        return ToolDefinition(self.name, f"scripted sub-agent {self.name}", schema)

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self.policy

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        link = ApprovalLink(
            "parent", invocation.session_id, invocation.turn_id, invocation.call.id, self.name
        )
        builder = (
            AgentSession.builder(ScriptedModel([list(r) for r in self.rounds]), self.workspace)
            .include_file_tools(False)
            .include_shell_tool(False)
            .tools(self.tools)
            .approval_policy(ChainedApproval(self.approvals, link))
        )
        with builder.build() as session:

            async def run(cancellation: AgentCancellation) -> AgentTurn:
                return await session.run("delegated task", cancellation=cancellation)

            try:
                nested = await run_nested_turn(run, invocation)
            finally:
                self.histories.append(session.history)
        self.outcomes.append(nested.outcome)
        if nested.turn is None:
            return ToolOutput.error(nested.describe())
        return ToolOutput(nested.turn.response.text)


__all__ = ["ScriptedSubAgent"]
