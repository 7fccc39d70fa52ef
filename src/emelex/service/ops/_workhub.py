"""WorkHub: a coordinator session starting worker sessions and collecting their results."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from emelex.contracts import (
    MAX_WORKERS,
    AgentWorker,
    ForkWorker,
    WorkerReceipt,
    WorkerStatus,
    WorkHubSnapshot,
    from_wire,
    to_wire,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    ForkRefused,
    QueueFull,
    UnknownAgent,
)
from emelex.service._events import (
    SESSION_CREATED,
    WORKER_STARTED,
)
from emelex.service._session import HostSession
from emelex.service._state import (
    fork_session_id,
    operation_receipt,
)
from emelex.store import (
    NewEvent,
    OperationRecord,
    SessionExists,
)

if TYPE_CHECKING:
    from emelex.service._registry import Services


async def start_worker(
    services: Services,
    coordinator_id: str,
    origin: ForkWorker | AgentWorker,
    task: str,
    *,
    operation: str,
    tools: Sequence[str] | None = None,
) -> WorkerReceipt:
    """Start a worker of the coordinator session and hand it ``task``: a fork of the
    coordinator (``ForkWorker``, through a turn or all history) or a new session of
    a named agent on the coordinator's workspace (``AgentWorker``). Its enabled tools
    are ``tools`` or the coordinator's, never wider than the coordinator's
    (:class:`ForkRefused`). Each step is idempotent under ``operation``, so a retry
    after a lost answer (or a Host restart halfway) completes the same worker.
    Further tasks, watching and results use the ordinary operations on the worker's
    session; :meth:`workers` lists them all."""
    coordinator = services.registry.get(coordinator_id)
    services.registry.check_open()
    body = {
        "coordinatorId": coordinator_id,
        "origin": to_wire(origin),
        "task": task,
        "tools": None if tools is None else list(tools),
    }
    digest = operation_digest("startWorker", body)
    original = await services.find_receipt(coordinator, operation, digest)
    if original is not None:
        return from_wire(WorkerReceipt, original)
    known = [w for w in coordinator.workers if w[2] != operation]
    if len(known) >= MAX_WORKERS:
        raise QueueFull(f"the coordinator already has {MAX_WORKERS} workers")
    # Sub-operations of this one, each idempotent on its own (ids stay within 128).
    step = f"worker.{operation}"[:118]
    allowed = await services.enabled_tools(coordinator)
    wanted = tuple(dict.fromkeys(tools)) if tools is not None else allowed
    if not set(wanted) <= set(allowed):
        wider = sorted(set(wanted) - set(allowed))
        raise ForkRefused(f"a worker cannot enable tools its coordinator has not: {wider}")
    if isinstance(origin, ForkWorker):
        forked = await services.operations.fork(
            coordinator_id,
            revision=coordinator.revision,
            turn_id=origin.turn_id,
            tools=wanted,
            operation=step + ".fork",
        )
        worker_id: str = forked.session.id
    else:
        worker_id = await create_worker(services, coordinator, origin.agent, wanted, step + ".new")
    sent = await services.operations.send(worker_id, task, operation=step + ".task")
    sequence = coordinator.next_sequence
    receipt = WorkerReceipt(
        worker_id=worker_id,  # type: ignore[arg-type]
        invocation_id=sent.invocation_id,
        receipt=operation_receipt(operation, "startWorker", coordinator_id, sequence),
    )
    payload = {
        "workerId": worker_id,
        "invocationId": sent.invocation_id,
        "operation": operation,
    }
    async with coordinator.lock:
        replayed = await coordinator.commit(
            [NewEvent(WORKER_STARTED, None, payload)],
            OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
        )
        if replayed is not None:
            return from_wire(WorkerReceipt, json.loads(replayed))
    return receipt


async def workers(services: Services, coordinator_id: str) -> WorkHubSnapshot:
    """Every worker of the coordinator in start order, with its first task's state
    and, once completed, its answer."""
    coordinator = services.registry.get(coordinator_id)
    statuses = []
    for worker_id, invocation_id, _ in coordinator.workers:
        worker = services.registry.get(worker_id)
        if invocation_id in worker.queue:
            running = worker.queue.running
            state = (
                "running"
                if running is not None and running.work.invocation_id == invocation_id
                else "queued"
            )
            result = None
        else:
            done = await services.operations.execute_result(worker_id, invocation_id)
            assert done is not None
            state, result = done.status, done.answer
        statuses.append(
            WorkerStatus(
                worker_id=worker_id,  # type: ignore[arg-type]
                invocation_id=invocation_id,  # type: ignore[arg-type]
                state=state,  # type: ignore[arg-type]
                result=result,
            )
        )
    return WorkHubSnapshot(
        coordinator_id=coordinator_id,  # type: ignore[arg-type]
        workers=tuple(statuses),
    )


async def create_worker(
    services: Services, coordinator: HostSession, agent: str, tools: tuple[str, ...], operation: str
) -> str:
    """A new session of ``agent`` on the coordinator's workspace, narrowed to
    ``tools``; its id follows from the coordinator and the operation."""
    if agent not in services.agents:
        raise UnknownAgent(f"the Host knows no agent named {agent!r}")
    worker_id = fork_session_id(coordinator.session_id, operation)
    if worker_id in services.registry:
        return worker_id
    config = {
        "host": True,
        "agent": agent,
        "workspace": coordinator.workspace,
        "workspaceIdentity": coordinator.log.workspace_identity,
        "title": None,
        "tools": list(tools),
        "coordinator": coordinator.session_id,
    }
    created = [NewEvent(SESSION_CREATED, None, config)]
    state = services.registry.new(worker_id, config, created_at=time.time(), events=created)
    # Narrow now, so a tool the agent lacks fails here and not in its first turn.
    app = await services.app_session(state, False)
    try:
        missing = sorted(set(tools) - set(app.agent_session.available_tools))
        if missing:
            raise ForkRefused(f"agent {agent!r} has no tools {missing}")
        # The worker never holds a tool its coordinator has not enabled.
        app.agent_session.set_enabled_tools(
            [t for t in app.agent_session.available_tools if t in set(tools)]
        )
        with contextlib.suppress(SessionExists):  # a retry after a lost answer
            await services.store.create_session(worker_id, "{}", config, events=created)
    except BaseException:
        with trio.CancelScope(shield=True):
            await app.aclose()
        raise
    services.registry.adopt(state)
    return worker_id
