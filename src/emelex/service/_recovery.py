"""Starting again from the log: rebuilding sessions and taking up what a lost Host left.

Opening a Host rebuilds every stored session with the reducer the live path uses. An
invocation some Host started and nobody finished is taken up by whoever holds the session
(this Host alone, or the lease holder). Under the agent's ``resume`` setting its turn
continues from its last progress journal (or starts again when none was written); under
``settle``, or when it cannot be resumed, it is settled as interrupted: a turn in which
a tool may have run keeps its journalled checkpoint, any other is rolled back, and its
unanswered interactions are settled so no question is asked twice. The batches are built
here and committed through the session, like every other change.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs

from emelex._ids import new_id
from emelex.agent import InvalidTurnProgress, TurnProgress
from emelex.contracts import Diagnostic, Resolution, to_wire
from emelex.model import Message, from_json
from emelex.service._diagnostics import DIAGNOSTIC_RECORDED, diagnostic
from emelex.service._events import INTERACTION_RESOLVED, QUEUE_FINISHED, QUEUE_RESUMED
from emelex.service._queue import Work
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
        turn_id, turn = settled_turn(session, invocation_id)
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


def settled_turn(session: HostSession, invocation_id: str) -> tuple[str, list[NewEvent]]:
    """The turn events that end a lost invocation's turn by the harness rule: its last
    journal's checkpoint when a tool may have run, else a rollback."""
    journal = session.log.journals.get(invocation_id)
    if journal is not None and journal.may_have_run is not False:
        try:
            messages = journal.progress().messages
        except InvalidTurnProgress:
            # Unreadable as progress (a record from elsewhere): the checkpoint alone.
            messages = tuple(from_json(json.dumps(body), Message) for body in journal.messages)
        return journal.turn_id, turn_events(journal.turn_id, messages, outcome="checkpointed")
    turn_id = journal.turn_id if journal is not None else new_id()
    return turn_id, turn_events(turn_id, (), outcome="rolled_back")


#: Restarts after which a Host stops taking an invocation up again and settles it (a
#: turn whose resumption itself brings its Host down must not do so for ever).
MAX_RESUMES: Final = 3


@attrs.frozen
class Resumption:
    """An invocation a restarted Host takes up again: its work, and the progress to
    continue from (None: its turn starts again from the user's message)."""

    work: Work
    progress: TurnProgress | None


async def resume_or_settle(session: HostSession, mode: str) -> Resumption | None:
    """Take up what a lost Host left started (the caller holds the lock and, with other
    Hosts, the lease): resume it when ``mode`` is ``"resume"`` and it can be, recording
    that in the log; otherwise settle it. None when there is nothing to take up."""
    log = session.log
    interrupted = log.interrupted()
    entry = session.queue.running
    if (
        mode != "resume"
        or len(interrupted) != 1
        or entry is None
        or entry.work.invocation_id != interrupted[0]
        or interrupted[0] in log.stopping  # a stop asked before the loss stands
        or log.resumes.get(interrupted[0], 0) >= MAX_RESUMES
    ):
        await settle_interrupted(session)
        return None
    invocation_id = interrupted[0]
    journal = log.journals.get(invocation_id)
    progress: TurnProgress | None = None
    if journal is not None:
        try:
            progress = journal.progress()
        except InvalidTurnProgress:
            await settle_interrupted(session)
            return None
    source = "journal" if progress is not None else "start"
    turn_id = progress.turn_id if progress is not None else None
    batch = [NewEvent(QUEUE_RESUMED, turn_id, {"invocationId": invocation_id, "from": source})]
    message = "the Host stopped while this invocation ran; a restarted Host continues its turn " + (
        "from its last progress record" if progress is not None else "from its start"
    )
    recorded = diagnostic_for(
        session, "execution", "resumed", message, invocation_id, turn_id, len(batch)
    )
    batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
    await session.commit(batch)
    return Resumption(entry.work, progress)


async def recover(
    store: Store,
    registry: SessionRegistry,
    session_config: Callable[[str], Awaitable[dict[str, Any] | None]],
    *,
    settle_now: Callable[[str], bool],
) -> None:
    """Rebuild every stored session this Host serves and adopt it, settling at once
    what a previous Host left started in sessions whose agent ``settle_now`` names (a
    Host alone, agents set to ``settle``); the runner, or whoever takes a session's
    lease, resumes or settles the others. Queued work keeps its place."""
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
        newest = await store.last_position(summary.id, through=session.revision)
        session.last_row = None if newest is None else wire_position(newest)
        if settle_now(session.agent_name):
            async with session.lock:
                await settle_interrupted(session)
        registry.adopt(session)
