"""Interactions: approvals of running turns as durable records a client answers."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    Interaction,
    InteractionResponse,
    PendingInteractions,
    Resolution,
    RespondReceipt,
    from_wire,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    InteractionSettled,
    UnknownInteraction,
)
from emelex.service._events import (
    INTERACTION_RESOLVED,
)
from emelex.service._state import operation_receipt, resolved_interaction
from emelex.store import (
    NewEvent,
    OperationRecord,
)

if TYPE_CHECKING:
    from emelex.service._registry import Services


async def pending_interactions(services: Services, session_id: str) -> PendingInteractions:
    state = services.registry.get(session_id)
    return PendingInteractions(
        session_id=session_id,  # type: ignore[arg-type]
        interactions=tuple(state.pending.values()),
    )


async def interaction(services: Services, session_id: str, interaction_id: str) -> Interaction:
    state = services.registry.get(session_id)
    if interaction_id in state.pending:
        return state.pending[interaction_id]
    if interaction_id in state.resolved:
        return state.resolved[interaction_id]
    raise UnknownInteraction(f"session {session_id} has no interaction {interaction_id}")


async def respond(
    services: Services,
    session_id: str,
    interaction_id: str,
    response: InteractionResponse,
    *,
    operation: str,
) -> RespondReceipt:
    """Answer a pending interaction (approve runs the call once; deny tells the model
    why). An interaction already answered or settled raises
    :class:`InteractionSettled`."""
    state = services.registry.get(session_id)
    if not isinstance(response, ApproveResponse | DenyResponse):
        raise TypeError("respond needs an ApproveResponse or a DenyResponse")
    body = {"sessionId": session_id, "interactionId": interaction_id, **to_wire(response)}
    digest = operation_digest("respond", body)
    async with state.lock:
        original = await services.find_receipt(state, operation, digest)
        if original is not None:
            return from_wire(RespondReceipt, original)
        pending = state.pending.get(interaction_id)
        if pending is None:
            if interaction_id in state.resolved:
                raise InteractionSettled(f"interaction {interaction_id} is already settled")
            raise UnknownInteraction(f"session {session_id} has no interaction {interaction_id}")
        sequence = state.next_sequence
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
