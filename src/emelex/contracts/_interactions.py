"""Durable interactions (approvals of running turns) and the responses that settle them."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._history import ToolCallInfo
from emelex.contracts._ids import InteractionId, InvocationId, OperationRef, SessionId, TurnId
from emelex.contracts._limits import MAX_MESSAGE_CHARS, MAX_PAGE_SIZE, MAX_SAFE_INTEGER
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._wire import count, items, text, wire, wire_union

InteractionState = Literal["pending", "resolved"]
#: ``interrupted``: the Host restarted (or the turn stopped) before an answer; the turn was
#: settled by the harness rules and the question is never asked again.
ResolutionOutcome = Literal["approved", "denied", "interrupted"]
ResolvedBy = Literal["client", "stop", "restart"]


@wire
class Resolution:
    """How an interaction ended."""

    outcome: ResolutionOutcome
    by: ResolvedBy
    reason: str | None = text(max_len=MAX_MESSAGE_CHARS)
    sequence: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class Interaction:
    """An approval request of a running turn, reconstructible after a reconnect."""

    id: InteractionId
    session_id: SessionId
    invocation_id: InvocationId
    turn_id: TurnId
    tool_call: ToolCallInfo
    reason: str = text(max_len=MAX_MESSAGE_CHARS)
    state: InteractionState
    requested_sequence: int = count(maximum=MAX_SAFE_INTEGER)
    resolution: Resolution | None


@wire
class PendingInteractions:
    """The interactions awaiting an answer, oldest first."""

    session_id: SessionId
    interactions: tuple[Interaction, ...] = items(max_items=MAX_PAGE_SIZE)


@wire
class ApproveResponse:
    """Run the proposed tool call."""

    kind: Literal["approve"] = "approve"


@wire
class DenyResponse:
    """Refuse the proposed tool call; the model sees the reason."""

    kind: Literal["deny"] = "deny"
    reason: str = text(max_len=MAX_MESSAGE_CHARS)


InteractionResponse = ApproveResponse | DenyResponse
wire_union("InteractionResponse", InteractionResponse)


@wire
class RespondRequest:
    """Answer one pending interaction."""

    session_id: SessionId
    interaction_id: InteractionId
    response: InteractionResponse
    operation: OperationRef


@wire
class RespondReceipt:
    """The interaction as the answer left it, and the operation receipt."""

    interaction: Interaction
    receipt: OperationReceipt


@wire
class PendingInteractionsRequest:
    """List the interactions of a session that await an answer."""

    session_id: SessionId


@wire
class InteractionRequest:
    """Read one interaction (pending or resolved) to reconstruct its original request."""

    session_id: SessionId
    interaction_id: InteractionId
