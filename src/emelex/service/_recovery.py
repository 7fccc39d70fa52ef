"""Starting again from the log: rebuilding sessions and settling what a lost Host left.

Opening a Host rebuilds every stored session with the reducer the live path uses. An
invocation some Host started and nobody finished is settled as interrupted by whoever
holds the session (this Host alone, or the lease holder): a journalled turn keeps its
checkpoint (a tool may have run), any other is rolled back, and its unanswered
interactions are settled so no question is asked twice. The batches are built here and
committed through the session, like every other change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from emelex._ids import new_id
from emelex.contracts import Diagnostic, Resolution, to_wire
from emelex.model import Message, from_json
from emelex.service._diagnostics import DIAGNOSTIC_RECORDED, diagnostic
from emelex.service._events import INTERACTION_RESOLVED, QUEUE_FINISHED
from emelex.service._registry import SessionRegistry
from emelex.service._rows import wire_position
from emelex.service._session import HostSession
from emelex.service._state import resolved_interaction
from emelex.store import NewEvent, Store, turn_events


def diagnostic_for(
    session: HostSession,
    kind: str,
    code: str,
    message: str,
    invocation_id: str | None,
    turn_id: str | None,
    offset: int,
) -> Diagnostic:
    """A diagnostic for the event ``offset`` events into the session's next commit."""
    return diagnostic(
        revision=session.diagnostics.revision + 1,
        diagnostic_id=new_id(),
        kind=kind,
        code=code,
        message=message,
        invocation_id=invocation_id,
        turn_id=turn_id,
        event_sequence=session.next_sequence - 1 + offset,
        recorded_at_ms=int(time.time() * 1000),
    )


def interaction_settlements(session: HostSession, invocation_id: str, by: str) -> list[NewEvent]:
    """The events that settle an ended invocation's unanswered interactions as
    interrupted (the question is never asked again)."""
    events = []
    for pending in session.pending.values():
        if pending.invocation_id != invocation_id:
            continue
        resolved = resolved_interaction(
            pending,
            Resolution(
                outcome="interrupted",
                by=by,  # type: ignore[arg-type]
                reason=None,
                sequence=session.next_sequence,
            ),
        )
        events.append(NewEvent(INTERACTION_RESOLVED, resolved.turn_id, to_wire(resolved)))
    return events


async def settle_interrupted(session: HostSession) -> None:
    """End the invocations a lost Host had started (the caller holds the lock and,
    with other Hosts, the lease)."""
    for invocation_id in session.log.interrupted():
        journal = session.log.journals.get(invocation_id)
        if journal is not None:
            # A tool may have run: keep the journalled checkpoint (harness rule).
            turn_id = journal.turn_id
            messages = [from_json(json.dumps(body), Message) for body in journal.messages]
            turn = turn_events(turn_id, messages, outcome="checkpointed")
        else:
            turn_id = new_id()
            turn = turn_events(turn_id, (), outcome="rolled_back")
        batch = [
            *turn,
            *interaction_settlements(session, invocation_id, "restart"),
            NewEvent(
                QUEUE_FINISHED,
                turn_id,
                {
                    "invocationId": invocation_id,
                    "outcome": "interrupted",
                    "finishedAtMs": int(time.time() * 1000),
                },
            ),
        ]
        recorded = diagnostic_for(
            session,
            "execution",
            "interrupted",
            "the Host stopped while this invocation ran; its turn was settled by the harness rules",
            invocation_id,
            turn_id,
            len(batch),
        )
        batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
        await session.commit(batch)


async def recover(
    store: Store,
    registry: SessionRegistry,
    session_config: Callable[[str], Awaitable[dict[str, Any] | None]],
    *,
    alone: bool,
) -> None:
    """Rebuild every stored session this Host serves and adopt it. ``alone`` (no other
    Host shares the store): settle what a previous Host left started now; otherwise
    whoever takes a session's lease settles it. Queued work keeps its place."""
    for summary in await store.list_sessions():
        config = await session_config(summary.id)
        if config is None:
            continue
        session = registry.new(summary.id, config, created_at=summary.created_at)
        while True:
            events = await store.events_after(summary.id, session.revision, limit=1000)
            if not events:
                break
            session.absorb(events)
        newest = await store.last_position(summary.id)
        session.last_row = None if newest is None else wire_position(newest)
        if alone:
            async with session.lock:
                await settle_interrupted(session)
        registry.adopt(session)
