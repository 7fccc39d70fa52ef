"""Typed events a turn delivers, in order, to its consumer."""

from __future__ import annotations

from typing import TypeAlias

import attrs

from emelex.agent._approval import ApprovalDecision
from emelex.agent._hooks import HookRecord
from emelex.model import Progress, Response, ToolCall, Usage
from emelex.tools import ToolOutput


@attrs.frozen
class TurnStarted:
    turn_id: str


@attrs.frozen
class ModelStarted:
    turn_id: str
    round: int


@attrs.frozen
class AnswerDelta:
    turn_id: str
    round: int
    text: str


@attrs.frozen
class ReasoningDelta:
    turn_id: str
    round: int
    text: str


@attrs.frozen
class ModelProgress:
    """Presentation telemetry from the model (never enters history)."""

    turn_id: str
    round: int
    progress: Progress


@attrs.frozen
class ModelCompleted:
    """The round's terminal response; tool calls already carry harness ids."""

    turn_id: str
    round: int
    response: Response


@attrs.frozen
class ToolProposed:
    turn_id: str
    round: int
    call: ToolCall


@attrs.frozen
class ApprovalRequested:
    turn_id: str
    call_id: str
    reason: str


@attrs.frozen
class ApprovalResolved:
    turn_id: str
    call_id: str
    decision: ApprovalDecision


@attrs.frozen
class ToolStarted:
    turn_id: str
    call_id: str
    name: str


@attrs.frozen
class ToolProgress:
    turn_id: str
    call_id: str
    message: str
    completed: int | None = None
    total: int | None = None


@attrs.frozen
class ToolCompleted:
    """A call's one result. ``executed`` is False for synthetic results (invalid,
    unavailable, denied, not executed)."""

    turn_id: str
    call_id: str
    output: ToolOutput
    executed: bool


@attrs.frozen
class HookApplied:
    """A lifecycle hook changed something (the record says what, before and after)."""

    turn_id: str
    record: HookRecord


@attrs.frozen
class TurnCompleted:
    turn_id: str
    usage: Usage


@attrs.frozen
class TurnFailed:
    turn_id: str
    error: str
    rolled_back: bool


AgentEvent: TypeAlias = (
    TurnStarted
    | ModelStarted
    | AnswerDelta
    | ReasoningDelta
    | ModelProgress
    | ModelCompleted
    | ToolProposed
    | ApprovalRequested
    | ApprovalResolved
    | ToolStarted
    | ToolProgress
    | ToolCompleted
    | HookApplied
    | TurnCompleted
    | TurnFailed
)
