"""Mutations: operation receipts, send/stop and the session's work queue."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._ids import InvocationId, OperationRef, SessionId
from emelex.contracts._limits import (
    MAX_QUEUE_ENTRIES,
    MAX_SAFE_INTEGER,
    MAX_SETTLED_INVOCATIONS,
    MAX_SETTLED_TEXT_CHARS,
    MAX_TEXT_CHARS,
)
from emelex.contracts._wire import count, items, text, wire

#: The mutation a receipt records.
OperationKind = Literal[
    "createSession", "send", "stop", "respond", "fork", "execute", "startWorker", "snapshotPatch"
]


@wire
class OperationReceipt:
    """The durable outcome of one mutation, returned again for every retry of its reference.

    ``sequence`` is the event that committed it; a retry with the same ``operation`` and a
    different request body is refused with a conflict, never applied.
    """

    operation: OperationRef
    action: OperationKind
    session_id: SessionId
    sequence: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class SendRequest:
    """Admit a user message to the session's work queue."""

    session_id: SessionId
    text: str = text(min_len=1, max_len=MAX_TEXT_CHARS, limit="send text")
    operation: OperationRef


@wire
class SendReceipt:
    """The admitted invocation's identity (stop names it) and the operation receipt."""

    invocation_id: InvocationId
    receipt: OperationReceipt


@wire
class StopRequest:
    """Stop one exact invocation (queued: removed; running: cancelled by harness rules)."""

    session_id: SessionId
    invocation_id: InvocationId
    operation: OperationRef


StopOutcome = Literal["removedFromQueue", "stopping", "alreadyFinished"]


@wire
class StopReceipt:
    """What the stop found; a retried stop returns the same outcome."""

    invocation_id: InvocationId
    outcome: StopOutcome
    receipt: OperationReceipt


QueueState = Literal["queued", "running"]
WorkKind = Literal["send", "execute", "workerTask"]


@wire
class QueueEntry:
    """One admitted, unfinished invocation in a session's queue (in admission order)."""

    invocation_id: InvocationId
    operation: OperationRef
    work: WorkKind
    state: QueueState
    admitted_sequence: int = count(maximum=MAX_SAFE_INTEGER)


#: How an invocation that committed nothing ended.
SettledOutcome = Literal["stopped", "failed", "interrupted"]


@wire
class SettledInvocation:
    """An invocation that left the queue without committing a row of its own: stopped
    while queued, or stopped, failed or interrupted while it ran and rolled back by the
    harness rules. Its prompt is in no history row, so the queue keeps what happened.

    It sits in history after every row of a source sequence below ``finished_sequence``
    (the event that ended it). ``text`` is the prompt's first code points
    (``text_clipped`` when there were more); ``started`` tells whether it ran at all;
    ``stop_operation`` is the reference of the stop that asked for it (None: no stop
    did); ``finished_at_ms`` is when the Host ended it (None in logs written before
    Hosts recorded it).
    """

    invocation_id: InvocationId
    operation: OperationRef
    work: WorkKind
    text: str = text(max_len=MAX_SETTLED_TEXT_CHARS)
    text_clipped: bool
    outcome: SettledOutcome
    started: bool
    finished_sequence: int = count(minimum=1, maximum=MAX_SAFE_INTEGER)
    stop_operation: OperationRef | None
    finished_at_ms: int | None = count(maximum=MAX_SAFE_INTEGER)


@wire
class QueueSnapshot:
    """The whole queue at one revision (watch publishes a new snapshot on each change),
    and the newest invocations that ended with nothing committed (``settled``, oldest
    first, at most ``MAX_SETTLED_INVOCATIONS``)."""

    session_id: SessionId
    revision: int = count(maximum=MAX_SAFE_INTEGER)
    entries: tuple[QueueEntry, ...] = items(max_items=MAX_QUEUE_ENTRIES, limit="queue entries")
    settled: tuple[SettledInvocation, ...] = items(
        max_items=MAX_SETTLED_INVOCATIONS, limit="settled invocations", default=()
    )
