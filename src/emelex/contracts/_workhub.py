"""WorkHub: a coordinator session starts workers, hands them tasks and collects results."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._ids import AgentName, InvocationId, OperationRef, SessionId, TurnId
from emelex.contracts._limits import MAX_TEXT_CHARS, MAX_TOOLS, MAX_WORKERS
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._wire import items, text, wire, wire_union


@wire
class ForkWorker:
    """A worker forked from the coordinator (through ``turn_id``; null: all history)."""

    kind: Literal["fork"] = "fork"
    turn_id: TurnId | None


@wire
class AgentWorker:
    """A worker that is a new session of a named agent on the coordinator's workspace."""

    kind: Literal["agent"] = "agent"
    agent: AgentName


WorkerOrigin = ForkWorker | AgentWorker
wire_union("WorkerOrigin", WorkerOrigin)


@wire
class StartWorkerRequest:
    """Start a worker and hand it its first task; ``tools`` may only narrow."""

    coordinator_id: SessionId
    origin: WorkerOrigin
    task: str = text(min_len=1, max_len=MAX_TEXT_CHARS, limit="task text")
    tools: tuple[str, ...] | None = items(max_items=MAX_TOOLS, limit="worker tools")
    operation: OperationRef


@wire
class WorkerReceipt:
    """The worker session, its task's invocation and the operation receipt."""

    worker_id: SessionId
    invocation_id: InvocationId
    receipt: OperationReceipt


WorkerState = Literal["queued", "running", "completed", "failed", "stopped"]


@wire
class WorkerStatus:
    """A worker's latest task: its state and, once completed, its result text."""

    worker_id: SessionId
    invocation_id: InvocationId
    state: WorkerState
    result: str | None = text(max_len=MAX_TEXT_CHARS)


@wire
class WorkHubSnapshot:
    """Every worker of one coordinator, in start order."""

    coordinator_id: SessionId
    workers: tuple[WorkerStatus, ...] = items(max_items=MAX_WORKERS, limit="workers")


@wire
class WorkHubRequest:
    """Read the workers of one coordinator session."""

    coordinator_id: SessionId
