"""Deterministic tools and approval policies for tests (yours and ours)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import trio

from emelex.agent import (
    ApprovalContext,
    ApprovalDecision,
    Approve,
    Deny,
    Hook,
    HookContext,
    ReplaceResult,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)
from emelex.model import ToolCall, ToolDefinition
from emelex.testing._errors import ToolBehaviourError


@attrs.define
class ScriptedTool:
    """An :class:`~emelex.agent.AgentTool` with scripted behaviour.

    It takes ``duration`` seconds of Trio time (MockClock friendly). A ``cooperative``
    tool stops early with a result when its invocation's cancellation fires; ``fails``
    makes it raise :class:`ToolBehaviourError` at the end; ``approval`` is the reason
    it asks for approval (None: runs without asking). Every call is recorded in
    ``started`` and ``finished`` (call ids) for assertions.
    """

    name: str = "scripted"
    duration: float = 0.0
    policy: ToolCancellationPolicy = ToolCancellationPolicy.FINISH_ONCE_STARTED
    cooperative: bool = False
    fails: bool = False
    approval: str | None = None
    schema: Mapping[str, Any] = attrs.field(
        factory=lambda: {"type": "object", "properties": {}, "additionalProperties": True}
    )
    started: list[str] = attrs.field(factory=list)
    finished: list[str] = attrs.field(factory=list)
    interrupted: list[str] = attrs.field(factory=list)

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, f"scripted tool {self.name}", dict(self.schema))

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self.policy

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return self.approval

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        call_id = invocation.call.id
        self.started.append(call_id)
        try:
            if self.cooperative:
                with trio.move_on_after(self.duration):
                    await invocation.cancellation.wait_cancelled()
                    self.finished.append(call_id)
                    return ToolOutput(f"{self.name} stopped early")
            else:
                await trio.sleep(self.duration)
        except trio.Cancelled:
            self.interrupted.append(call_id)
            raise
        self.finished.append(call_id)
        if self.fails:
            raise ToolBehaviourError(f"{self.name} failed as scripted")
        return ToolOutput(f"{self.name} done")


class ApproveAll:
    """Approves every call (tests and trusted automation only)."""

    def __init__(self) -> None:
        self.asked: list[ApprovalContext] = []

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        self.asked.append(context)
        return Approve()


@attrs.define
class ScriptedApprovals:
    """Answers approval requests from a list of decisions (True approve, False deny),
    each after ``delay`` seconds of Trio time; records every context it was asked.
    Runs out → denies."""

    decisions: Sequence[bool]
    delay: float = 0.0
    asked: list[ApprovalContext] = attrs.field(factory=list)

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        index = len(self.asked)
        self.asked.append(context)
        if self.delay:
            await trio.sleep(self.delay)
        if index < len(self.decisions) and self.decisions[index]:
            return Approve()
        return Deny("denied by script")


@attrs.define
class ScriptedHook(Hook):
    """A lifecycle hook that takes ``delay`` seconds of Trio time at each call and each
    result, and marks every result it reviewed with ``REVIEWED`` (a replacement), so a
    test can tell a reviewed result from one that entered history unreviewed."""

    delay: float = 0.0
    reviewed: list[str] = attrs.field(factory=list)

    async def before_tool_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> None:
        await trio.sleep(self.delay)

    async def after_tool_result(
        self, ctx: HookContext, call: ToolCall, output: ToolOutput
    ) -> ReplaceResult:
        await trio.sleep(self.delay)
        self.reviewed.append(call.id)
        return ReplaceResult(ToolOutput(REVIEWED + output.text, is_error=output.is_error))


#: The mark :class:`ScriptedHook` puts in front of every result it reviewed.
REVIEWED = "[reviewed] "
