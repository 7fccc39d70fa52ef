"""Forks: a new session that keeps a source's settled history, narrowed permissions and no work."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import attrs

from emelex.contracts import (
    MAX_PAGE_SIZE,
    Branch,
    ForkReceipt,
    Position,
    from_wire,
    to_wire,
)
from emelex.model import (
    Message,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    ForkRefused,
    OperationConflict,
)
from emelex.service._events import (
    FORK_RECORDED,
    SESSION_CREATED,
)
from emelex.service._rows import store_position, wire_position
from emelex.service._session import HostSession
from emelex.service._state import (
    fork_session_id,
    operation_receipt,
)
from emelex.store import (
    TURN_SETTLED,
    NewEvent,
    OperationRecord,
    SessionExists,
    turn_events,
)

if TYPE_CHECKING:
    from emelex.service._registry import Services


async def fork(
    services: Services,
    session_id: str,
    *,
    revision: int,
    operation: str,
    turn_id: str | None = None,
    tools: Sequence[str] | None = None,
    title: str | None = None,
) -> ForkReceipt:
    """Start a side conversation: a new session holding the source's history through
    the complete turn ``turn_id`` (None: all history), as of the source's event
    ``revision`` (a later turn may be running). It shares the workspace, has no
    work, and its enabled tools are ``tools`` (None: the source's), never wider than
    the source's. A retry with the same reference returns the original receipt.

    Raises :class:`ForkRefused` when ``revision`` is newer than the source, the turn
    is unknown or not settled by then, or ``tools`` would widen the permissions."""
    source = services.registry.get(session_id)
    services.registry.check_open()
    wanted = None if tools is None else tuple(dict.fromkeys(tools))
    body = {
        "sessionId": session_id,
        "turnId": turn_id,
        "revision": revision,
        "tools": None if wanted is None else list(wanted),
        "title": title,
    }
    digest = operation_digest("fork", body)
    fork_id = fork_session_id(session_id, operation)
    answered = await _earlier_answer(services, source, fork_id, operation, digest)
    if answered is not None:
        return answered
    if not 0 <= revision <= source.revision:
        raise ForkRefused(
            f"revision {revision} is not a revision of session {session_id}"
            f" (its newest is {source.revision})"
        )
    rows, through_turn = await fork_rows(services, source, revision, turn_id)
    enabled = await services.enabled_tools(source)
    if wanted is not None and not set(wanted) <= set(enabled):
        wider = sorted(set(wanted) - set(enabled))
        raise ForkRefused(f"a fork cannot enable tools its source has not: {wider}")
    branch = {
        "sourceSessionId": session_id,
        "sourceTurnId": through_turn,
        "sourceRevision": revision,
    }
    config = {
        "host": True,
        "agent": source.agent_name,
        "workspace": source.workspace,
        "workspaceIdentity": source.log.workspace_identity,
        "title": title,
        "branch": branch,
        "tools": list(wanted if wanted is not None else enabled),
    }
    events = _fork_events(config, rows)
    sequence = len(events)
    state = services.registry.new(fork_id, config, created_at=time.time(), events=events)
    receipt = ForkReceipt(
        session=state.info(),
        branch=from_wire(Branch, branch),
        receipt=operation_receipt(operation, "fork", fork_id, sequence),
    )
    try:
        await services.create(fork_id, config, events, operation, digest, receipt)
    except SessionExists:
        original = await services.find_receipt(services.registry.get(fork_id), operation, digest)
        if original is None:
            raise OperationConflict(f"operation {operation!r} named another fork") from None
        return await _claimed(source, operation, digest, from_wire(ForkReceipt, original))
    newest = await services.store.last_position(fork_id, through=state.revision)
    state.last_row = None if newest is None else wire_position(newest)
    services.registry.adopt(state)
    return await _claimed(source, operation, digest, receipt)


async def _earlier_answer(
    services: Services, source: HostSession, fork_id: str, operation: str, digest: str
) -> ForkReceipt | None:
    """The receipt of this same fork when it was made before (None: it was not)."""
    # One reference namespace per session: the source's own record of this reference
    # (a send's, say) conflicts here, and a fork recorded there answers at once.
    claimed = await services.find_receipt(source, operation, digest)
    if claimed is not None:
        return from_wire(ForkReceipt, claimed)
    if fork_id in services.registry:
        original = await services.find_receipt(services.registry.get(fork_id), operation, digest)
        if original is not None:
            return await _claimed(source, operation, digest, from_wire(ForkReceipt, original))
    return None


def _fork_events(
    config: dict[str, Any], rows: Sequence[tuple[str, Sequence[Message]]]
) -> list[NewEvent]:
    """The new session's first events: its creation, then the copied turns (marked
    ``copied``, so the fork's own prepared requests are told from its source's)."""
    events = [NewEvent(SESSION_CREATED, None, dict(config, copied=len(rows)))]
    for turn, messages in rows:
        for event in turn_events(turn, messages):
            events.append(attrs.evolve(event, payload=dict(event.payload, copied=True)))
    return events


async def _claimed(
    source: HostSession, operation: str, digest: str, receipt: ForkReceipt
) -> ForkReceipt:
    """Record the fork's reference in its source's namespace too (idempotent), so a later
    send (or any other mutation) of the source with that reference conflicts."""
    record = OperationRecord(operation, digest, json.dumps(to_wire(receipt)))
    event = NewEvent(FORK_RECORDED, None, {"forkId": receipt.session.id, "operation": operation})
    async with source.lock:
        await source.commit([event], record)
    return receipt


async def fork_receipt(
    services: Services, session_id: str, *, operation: str
) -> ForkReceipt | None:
    """The fork published under ``operation`` from ``session_id``, or None. None
    proves nothing (the fork may not have been published yet) and authorizes no
    replacement: retry the original request with its reference."""
    services.registry.get(session_id)
    fork_id = fork_session_id(session_id, operation)
    if fork_id not in services.registry:
        return None
    stored = await services.store.operation_receipt(fork_id, operation)
    return None if stored is None else from_wire(ForkReceipt, json.loads(stored))


async def fork_rows(
    services: Services, source: HostSession, revision: int, turn_id: str | None
) -> tuple[list[tuple[str, list[Message]]], str | None]:
    """The source's settled turns (id, messages) up to ``revision``, through
    ``turn_id`` when given."""
    settled: list[str] = []
    after = 0
    while after < revision:
        events = await services.store.events_after(source.session_id, after, limit=1000)
        if not events:
            break
        for event in events:
            if event.sequence > revision:
                break
            if event.kind == TURN_SETTLED and event.turn_id is not None:
                settled.append(event.turn_id)
        after = events[-1].sequence
    if turn_id is not None:
        if turn_id not in settled:
            raise ForkRefused(
                f"turn {turn_id} of session {source.session_id} is not a settled turn"
                f" at revision {revision}"
            )
        settled = settled[: settled.index(turn_id) + 1]
    keep = set(settled)
    by_turn: dict[str, list[Message]] = {turn: [] for turn in settled}
    position: Position | None = None
    while True:
        page = await services.operations.history(
            source.session_id, through=revision, after=position, limit=MAX_PAGE_SIZE
        )
        for row in page.rows:
            if row.turn_id in keep:
                stored = await services.store.read_row(
                    source.session_id, store_position(row.position), through=revision
                )
                assert stored is not None
                by_turn[row.turn_id].append(stored.message())
        if page.next_after is None:
            break
        position = page.next_after
    last = settled[-1] if settled else None
    return [(turn, by_turn[turn]) for turn in settled if by_turn[turn]], (
        turn_id if turn_id is not None else last
    )
