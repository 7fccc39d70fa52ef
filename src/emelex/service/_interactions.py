"""Interactions: approvals of running turns as durable records a client answers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from emelex._ids import new_id
from emelex.agent import (
    ApprovalContext,
    ApprovalDecision,
    Deny,
)
from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    Interaction,
    InteractionResponse,
    PendingInteractions,
    Resolution,
    RespondReceipt,
    ToolCallInfo,
    from_wire,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    InteractionSettled,
    UnknownInteraction,
)
from emelex.service._events import (
    INTERACTION_REQUESTED,
    INTERACTION_RESOLVED,
)
from emelex.service._session import HostSession
from emelex.service._state import operation_receipt, resolved_interaction
from emelex.store import (
    NewEvent,
    OperationRecord,
)

if TYPE_CHECKING:
    from emelex.service._host import Host


class HostApprovals:
    """The approval policy of every Host session: each request becomes a durable
    interaction that a client answers with ``respond`` (possibly after reconnecting,
    possibly through another Host)."""

    def __init__(self, state: HostSession) -> None:
        self._state = state

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        state = self._state
        running = state.log.running
        if running is None:
            return Deny("no invocation is running")
        interaction_id = new_id()
        async with state.lock:
            sequence = state.revision + 1
            interaction = from_wire(
                Interaction,
                {
                    "id": interaction_id,
                    "sessionId": state.session_id,
                    "invocationId": running,
                    "turnId": context.turn_id,
                    "toolCall": to_wire(
                        ToolCallInfo(
                            id=context.call.id,
                            name=context.call.name,
                            arguments=dict(context.call.arguments),
                        )
                    ),
                    "reason": context.reason[:4096],
                    "state": "pending",
                    "requestedSequence": sequence,
                    "resolution": None,
                },
            )
            await state.commit(
                [NewEvent(INTERACTION_REQUESTED, context.turn_id, to_wire(interaction))]
            )
            waiter = state.waiter(interaction_id)
        await waiter.answered.wait()
        assert waiter.decision is not None
        return waiter.decision


async def pending_interactions(host: Host, session_id: str) -> PendingInteractions:
    state = host._state(session_id)
    return PendingInteractions(
        session_id=session_id,  # type: ignore[arg-type]
        interactions=tuple(state.pending.values()),
    )


async def interaction(host: Host, session_id: str, interaction_id: str) -> Interaction:
    state = host._state(session_id)
    if interaction_id in state.pending:
        return state.pending[interaction_id]
    if interaction_id in state.resolved:
        return state.resolved[interaction_id]
    raise UnknownInteraction(f"session {session_id} has no interaction {interaction_id}")


async def respond(
    host: Host,
    session_id: str,
    interaction_id: str,
    response: InteractionResponse,
    *,
    operation: str,
) -> RespondReceipt:
    """Answer a pending interaction (approve runs the call once; deny tells the model
    why). An interaction already answered or settled raises
    :class:`InteractionSettled`."""
    state = host._state(session_id)
    if not isinstance(response, ApproveResponse | DenyResponse):
        raise TypeError("respond needs an ApproveResponse or a DenyResponse")
    body = {"sessionId": session_id, "interactionId": interaction_id, **to_wire(response)}
    digest = operation_digest("respond", body)
    async with state.lock:
        original = await host._find(state, operation, digest)
        if original is not None:
            return from_wire(RespondReceipt, original)
        pending = state.pending.get(interaction_id)
        if pending is None:
            if interaction_id in state.resolved:
                raise InteractionSettled(f"interaction {interaction_id} is already settled")
            raise UnknownInteraction(f"session {session_id} has no interaction {interaction_id}")
        sequence = state.revision + 1
        approved = isinstance(response, ApproveResponse)
        resolved = resolved_interaction(
            pending,
            Resolution(
                outcome="approved" if approved else "denied",
                by="client",
                reason=None if approved else response.reason,  # type: ignore[union-attr]
                sequence=sequence,
            ),
        )
        receipt = RespondReceipt(
            interaction=resolved,
            receipt=operation_receipt(operation, "respond", session_id, sequence),
        )
        # Applying the resolution answers the approval waiting for it (on this Host or,
        # through its follower, on the Host that runs the turn).
        await state.commit(
            [NewEvent(INTERACTION_RESOLVED, resolved.turn_id, to_wire(resolved))],
            OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
        )
    return receipt
