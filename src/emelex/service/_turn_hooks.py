"""The one seam between a running turn and its Host session.

A turn reaches its session through a single :class:`TurnHooks`: the model it calls is
wrapped to record each main request (for context reports) and to stream live drafts; its
approvals become durable interactions; its tool journal is written before each tool may
start. Writes are batched: request records wait in the session (see
:meth:`HostSession.defer`) and go to the store with the turn's next commit, so a turn with
one tool call takes three store transactions (its start, the progress before the tool,
its end): the progress after a batch waits the same way. The crash rules stay: the
journal is durable before the tool starts and an interaction before any client can
answer it; a Host lost before a batch's progress was written resumes from the record
before it, where the batch's calls read as interrupted (never run again).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from emelex._ids import new_id
from emelex.agent import ApprovalContext, ApprovalDecision, Deny, TurnProgress, current_turn
from emelex.contracts import Interaction, ToolCallInfo, from_wire, to_wire
from emelex.model import AgentModel, GenerationRequest
from emelex.service._drafting import DraftingModel
from emelex.service._drafts import DRAFT_INTERVAL
from emelex.service._errors import ServiceError
from emelex.service._events import (
    INTERACTION_REQUESTED,
    REQUEST_PREPARED,
    REQUEST_SETTLED,
    TURN_JOURNAL,
)
from emelex.service._session import HostSession
from emelex.service.ops._context import RecordingModel, summarize
from emelex.store import NewEvent

Spawn = Callable[..., Any]


class TurnHooks:
    """What a Host session's turns call (model records, drafts, approvals, journal).
    It holds the session only; the Host hands it nothing else."""

    def __init__(self, session: HostSession, spawn: Spawn) -> None:
        self._session = session
        session.drafts.configure(DRAFT_INTERVAL, spawn)

    def model(self, inner: AgentModel) -> AgentModel:
        """``inner`` recording its requests and drafting its deltas."""
        session = self._session
        drafting = DraftingModel(inner, session.drafts, lambda: session.log.running)
        return RecordingModel(drafting, self.prepared, self.settled)

    # -- request records (deferred to the turn's next commit) ---------------------------
    async def prepared(self, request: GenerationRequest) -> str:
        """Record a main request before the model starts; returns its id."""
        turn = current_turn()
        request_id = new_id()
        payload = {
            "requestId": request_id,
            "invocationId": self._session.log.running or "",
            "turnId": turn[1] if turn is not None else "",
            **summarize(request),
        }
        async with self._session.lock:
            self._session.defer(NewEvent(REQUEST_PREPARED, payload["turnId"], payload))
        return request_id

    async def settled(self, request_id: str, outcome: str, tokens: int | None) -> None:
        payload = {"requestId": request_id, "state": outcome, "providerInputTokens": tokens}
        async with self._session.lock:
            self._session.defer(NewEvent(REQUEST_SETTLED, None, payload))

    # -- the progress journal -----------------------------------------------------------
    async def journal(self, progress: TurnProgress) -> None:
        """Write down where the turn stands before an approval is asked or a tool may
        run: recovery continues it from here, or settles it as this checkpoint. Durable
        when this returns (with the request records waiting so far); a record between
        rounds waits for the session's next commit instead."""
        running = self._session.log.running
        if running is None:
            raise ServiceError("a turn wrote progress outside of any invocation")
        payload = {"invocationId": running, **progress.to_wire()}
        event = NewEvent(TURN_JOURNAL, progress.turn_id, payload)
        async with self._session.lock:
            if progress.between_rounds:
                # Nothing is about to start: it goes with the turn's next write (its
                # next journal, an interaction or its end), one transaction fewer.
                self._session.defer(event)
            else:
                await self._session.commit([event])

    # -- approvals ----------------------------------------------------------------------
    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        """Each approval becomes a durable interaction that a client answers with
        ``respond`` (after reconnecting, or through another Host); the turn waits."""
        session = self._session
        running = session.log.running
        if running is None:
            return Deny("no invocation is running")
        asked = _asked_before(session, running, context.call.id)
        if asked is not None:
            # A resumed turn: the question is still the one asked before the restart
            # (same id, maybe answered meanwhile through another Host).
            async with session.lock:
                waiter = session.waiter(asked)
            await waiter.answered.wait()
            assert waiter.decision is not None
            return waiter.decision
        interaction_id = new_id()
        async with session.lock:
            interaction = from_wire(
                Interaction,
                {
                    "id": interaction_id,
                    "sessionId": session.session_id,
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
                    "requestedSequence": session.next_sequence,
                    "resolution": None,
                },
            )
            await session.commit(
                [NewEvent(INTERACTION_REQUESTED, context.turn_id, to_wire(interaction))]
            )
            waiter = session.waiter(interaction_id)
        await waiter.answered.wait()
        assert waiter.decision is not None
        return waiter.decision


def _asked_before(session: HostSession, invocation_id: str, call_id: str) -> str | None:
    """The interaction an earlier run of this invocation asked for ``call_id``."""
    for interactions in (session.log.pending, session.log.resolved):
        for interaction in interactions.values():
            if interaction.invocation_id == invocation_id and interaction.tool_call.id == call_id:
                return interaction.id
    return None
