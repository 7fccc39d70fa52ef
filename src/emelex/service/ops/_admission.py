"""Sessions made and work admitted or stopped: the operations that change a queue.

Each commits one event with its operation's receipt (a retry with the same reference
returns the original receipt); the reducer applies it, so the queue, the outcomes and
the watchers follow from that event alone.
"""

from __future__ import annotations

import json
import os
import time
import uuid

import trio

from emelex._ids import new_id
from emelex.contracts import (
    MAX_TEXT_CHARS,
    CreateSessionReceipt,
    OperationReceipt,
    SendReceipt,
    StopReceipt,
    from_wire,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    OperationConflict,
    QueueFull,
    ServiceError,
    UnknownAgent,
    UnknownInvocation,
)
from emelex.service._events import QUEUE_ADMITTED, QUEUE_FINISHED, QUEUE_STOP, SESSION_CREATED
from emelex.service._registry import Services, find_receipt
from emelex.service._state import SESSION_NAMESPACE, operation_receipt
from emelex.service.workspace._files_access import identity_of
from emelex.store import NewEvent, OperationRecord, SessionExists
from emelex.store import OperationConflict as StoreOperationConflict


async def workspace_identity(directory: str) -> list[int]:
    try:
        return list(await trio.to_thread.run_sync(identity_of, directory))
    except OSError as exc:
        raise ServiceError(f"workspace {directory} cannot be opened: {exc.strerror}") from exc


async def create_session(
    services: Services,
    agent: str,
    workspace: str | os.PathLike[str],
    *,
    operation: str,
    title: str | None = None,
) -> CreateSessionReceipt:
    """Create a session of the named agent on ``workspace`` (an existing directory).
    The session id follows from the operation reference, so a retry finds it."""
    services.registry.check_open()
    directory = str(await trio.Path(workspace).resolve())
    body = {"agent": agent, "workspace": directory, "title": title}
    digest = operation_digest("createSession", body)
    session_id = "s-" + uuid.uuid5(SESSION_NAMESPACE, operation).hex
    if session_id not in services.registry:
        if agent not in services.agents:
            raise UnknownAgent(f"the Host knows no agent named {agent!r}")
        if not await trio.Path(directory).is_dir():
            raise ServiceError(f"workspace {directory} is not a directory")
    receipt = operation_receipt(operation, "createSession", session_id, 1)
    # The directory's identity as created on: a directory put in its place later is
    # another workspace, which no workspace operation serves.
    identity = None if session_id in services.registry else await workspace_identity(directory)
    config = {"host": True, **body, "workspaceIdentity": identity}
    try:
        await services.create(
            session_id,
            config,
            [NewEvent(SESSION_CREATED, None, dict(body))],
            operation,
            digest,
            receipt,
        )
    except SessionExists:
        try:
            original = await services.store.find_operation(session_id, operation, digest)
        except StoreOperationConflict as exc:
            raise OperationConflict(str(exc)) from exc
        if original is None:
            raise OperationConflict(
                f"operation {operation!r} names another session's creation"
            ) from None
        receipt = from_wire(OperationReceipt, json.loads(original))
    else:
        created = [NewEvent(SESSION_CREATED, None, dict(body))]
        services.registry.adopt(
            services.registry.new(session_id, config, created_at=time.time(), events=created)
        )
    return CreateSessionReceipt(session=services.registry.get(session_id).info(), receipt=receipt)


async def send(services: Services, session_id: str, text: str, *, operation: str) -> SendReceipt:
    """Admit ``text`` to the session's queue. Raises :class:`QueueFull` (nothing is
    admitted) when the queue is full."""
    state = services.registry.get(session_id)
    if not text or len(text) > MAX_TEXT_CHARS:
        raise ServiceError(f"send text must hold 1 to {MAX_TEXT_CHARS} characters")
    digest = operation_digest("send", {"sessionId": session_id, "text": text})
    async with state.lock:
        try:
            state.queue.check_room()
        except QueueFull:
            # A retry of an admitted send still gets its receipt from a full queue.
            original = await find_receipt(services.store, session_id, operation, digest)
            if original is not None:
                return from_wire(SendReceipt, original)
            raise
        services.registry.check_open()
        invocation_id = new_id()
        sequence = state.next_sequence
        receipt = SendReceipt(
            invocation_id=invocation_id,  # type: ignore[arg-type]
            receipt=operation_receipt(operation, "send", session_id, sequence),
        )
        payload = {"invocationId": invocation_id, "operation": operation, "text": text}
        # One store round trip: the replay check happens inside the append.
        replayed = await state.commit(
            [NewEvent(QUEUE_ADMITTED, None, payload)],
            OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
        )
        if replayed is not None:
            return from_wire(SendReceipt, json.loads(replayed))
    state.wake.set()
    return receipt


async def stop(
    services: Services, session_id: str, invocation_id: str, *, operation: str
) -> StopReceipt:
    """Stop one invocation: a queued one leaves the queue; a running one is cancelled
    and settled by the harness rules (``stopping``); a finished one is left alone."""
    state = services.registry.get(session_id)
    digest = operation_digest("stop", {"sessionId": session_id, "invocationId": invocation_id})
    async with state.lock:
        original = await find_receipt(services.store, session_id, operation, digest)
        if original is not None:
            return from_wire(StopReceipt, original)
        if invocation_id in state.queue:
            running = state.queue.running
            outcome = (
                "stopping"
                if running is not None and running.work.invocation_id == invocation_id
                else "removedFromQueue"
            )
        elif invocation_id in state.finished:
            outcome = "alreadyFinished"
        else:
            raise UnknownInvocation(f"session {session_id} never admitted {invocation_id}")
        receipt = StopReceipt(
            invocation_id=invocation_id,  # type: ignore[arg-type]
            outcome=outcome,  # type: ignore[arg-type]
            receipt=operation_receipt(operation, "stop", session_id, state.next_sequence),
        )
        events = []
        if outcome == "removedFromQueue":
            finished = {
                "invocationId": invocation_id,
                "outcome": "stopped",
                "stopOperation": operation,
                "finishedAtMs": int(time.time() * 1000),
            }
            events.append(NewEvent(QUEUE_FINISHED, None, finished))
        else:
            asked = {"invocationId": invocation_id, "operation": operation}
            events.append(NewEvent(QUEUE_STOP, None, asked))
        # The reducer records the outcome; a running turn is cancelled by its runner's
        # session when the stop is applied (here, or on the Host that runs it).
        await state.commit(events, OperationRecord(operation, digest, json.dumps(to_wire(receipt))))
    return receipt
