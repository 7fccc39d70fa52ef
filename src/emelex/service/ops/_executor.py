"""The Executor: one task on an agent over attached, read-only input files."""

from __future__ import annotations

import functools
import shutil
import time
import uuid
from collections.abc import AsyncIterable, Sequence
from typing import TYPE_CHECKING

import trio

from emelex._ids import new_id
from emelex.contracts import (
    MAX_PAGE_SIZE,
    MAX_TEXT_CHARS,
    AttachmentMeta,
    ExecuteReceipt,
    ExecuteResult,
    Position,
    from_wire,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    OperationConflict,
    ServiceError,
    UnknownAgent,
    UnknownInvocation,
)
from emelex.service._events import (
    QUEUE_ADMITTED,
    SESSION_CREATED,
)
from emelex.service._state import (
    SESSION_NAMESPACE,
    operation_receipt,
)
from emelex.service.ops._attachments import check_metadata, extract
from emelex.store import (
    NewEvent,
)

if TYPE_CHECKING:
    from emelex.service._registry import Services


async def execute(
    services: Services,
    agent: str,
    text: str,
    *,
    operation: str,
    attachments: Sequence[AttachmentMeta] = (),
    resource: bytes | AsyncIterable[bytes] | None = None,
) -> ExecuteReceipt:
    """Run ``text`` as one task on ``agent`` in a new session whose private workspace
    holds the attached files (read-only). ``resource`` is the one binary resource
    with the files' bytes back to back, described in order by ``attachments``; each
    size and digest is checked while it is read, and the Host refuses more than
    ``max_attachment_bytes`` in all (:class:`AttachmentError`, nothing admitted).
    A retry with the same reference returns the original receipt without reading
    the resource again. Wait for the outcome with :meth:`execute_result`."""
    services.registry.check_open()
    if agent not in services.agents:
        raise UnknownAgent(f"the Host knows no agent named {agent!r}")
    if not text or len(text) > MAX_TEXT_CHARS:
        raise ServiceError(f"a task holds 1 to {MAX_TEXT_CHARS} characters")
    metas = tuple(attachments)
    check_metadata(metas, services.max_attachment_bytes)
    body = {"agent": agent, "text": text, "attachments": [to_wire(m) for m in metas]}
    digest = operation_digest("execute", body)
    session_id = "s-" + uuid.uuid5(SESSION_NAMESPACE, f"execute\0{operation}").hex
    if session_id in services.registry:
        original = await services.find_receipt(services.registry.get(session_id), operation, digest)
        if original is None:
            raise OperationConflict(f"operation {operation!r} named another request")
        return from_wire(ExecuteReceipt, original)
    workspace = services.root / "executor" / session_id
    await trio.Path(workspace).mkdir(mode=0o700, parents=True)
    try:
        await extract(resource, metas, str(workspace), limit=services.max_attachment_bytes)
        invocation_id = new_id()
        config = {"host": True, "agent": agent, "workspace": str(workspace), "title": None}
        admitted = {
            "invocationId": invocation_id,
            "operation": operation,
            "text": text,
            "work": "execute",
            "attachments": [to_wire(m) for m in metas],
        }
        events = [
            NewEvent(SESSION_CREATED, None, dict(config, executor=True)),
            NewEvent(QUEUE_ADMITTED, None, admitted),
        ]
        receipt = ExecuteReceipt(
            invocation_id=invocation_id,  # type: ignore[arg-type]
            session_id=session_id,  # type: ignore[arg-type]
            receipt=operation_receipt(operation, "execute", session_id, len(events)),
        )
        await services.create(session_id, config, events, operation, digest, receipt)
    except BaseException:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(
                functools.partial(shutil.rmtree, workspace, ignore_errors=True)
            )
        raise
    state = services.registry.new(session_id, config, created_at=time.time(), events=events)
    services.registry.adopt(state).wake.set()
    return receipt


async def execute_result(
    services: Services, session_id: str, invocation_id: str
) -> ExecuteResult | None:
    """How an Executor task ended, or None while it is queued or running."""
    state = services.registry.get(session_id)
    if invocation_id in state.queue:
        return None
    if invocation_id not in state.finished:
        raise UnknownInvocation(f"session {session_id} never admitted {invocation_id}")
    outcome = state.outcomes.get(invocation_id, "failed")
    status = {"completed": "completed", "stopped": "stopped"}.get(outcome, "failed")
    answer = None
    if status == "completed":
        position: Position | None = None
        while True:
            page = await services.operations.history(
                session_id, after=position, limit=MAX_PAGE_SIZE
            )
            for row in page.rows:
                if row.role == "assistant" and not row.tool_calls:
                    answer = row.body
            if page.next_after is None:
                break
            position = page.next_after
    return ExecuteResult(
        invocation_id=invocation_id,  # type: ignore[arg-type]
        session_id=session_id,  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        answer=answer,
    )
