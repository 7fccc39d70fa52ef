"""What the Host keeps per session, the event kinds it appends, and small helpers the
operation modules share."""

from __future__ import annotations

import uuid
from typing import Any, Final

import attrs
import trio

from emelex.agent import (
    AgentCancellation,
    ApprovalDecision,
)
from emelex.app import Session as AppSession
from emelex.contracts import (
    Interaction,
    OperationReceipt,
    Position,
    Resolution,
    from_wire,
    to_wire,
)
from emelex.service._diagnostics import (
    DiagnosticLog,
)
from emelex.service._drafts import LiveDrafts
from emelex.service._queue import WorkQueue
from emelex.service._watch import Subscriber

SESSION_NAMESPACE: Final = uuid.UUID("5f0c1c3e-8a43-4f55-9b53-2f7b8f0e6a10")


def fork_session_id(session_id: str, operation: str) -> str:
    """A fork's session id follows from its source and operation, so a retry finds it."""
    return "s-" + uuid.uuid5(SESSION_NAMESPACE, f"fork\0{session_id}\0{operation}").hex


def rows_after(cursor: Position | None, newest: Position | None) -> bool:
    """Whether rows exist after ``cursor`` (``newest`` is the newest row's position)."""
    if newest is None:
        return False
    if cursor is None:
        return True
    return (cursor.source_sequence, cursor.item_index) < (
        newest.source_sequence,
        newest.item_index,
    )


def resolved_interaction(interaction: Interaction, resolution: Resolution) -> Interaction:
    wire = to_wire(interaction)
    wire.update(state="resolved", resolution=to_wire(resolution))
    return from_wire(Interaction, wire)


def operation_receipt(
    operation: str, action: str, session_id: str, sequence: int
) -> OperationReceipt:
    return from_wire(
        OperationReceipt,
        {
            "operation": operation,
            "action": action,
            "sessionId": session_id,
            "sequence": sequence,
        },
    )


@attrs.define
class PendingInteraction:
    interaction: Interaction
    answered: trio.Event = attrs.field(factory=trio.Event)
    decision: ApprovalDecision | None = None


@attrs.define
class RequestRecord:
    """One prepared main request: its event, summary and (once known) its end."""

    sequence: int
    payload: dict[str, Any]
    settled_at: int | None = None
    state: str = "running"
    tokens: int | None = None

    def settle(self, settled_at: int, state: str, tokens: int | None) -> None:
        self.settled_at, self.state, self.tokens = settled_at, state, tokens


@attrs.define
class SessionState:
    session_id: str
    agent_name: str
    workspace: str
    title: str | None
    created_at: float
    queue: WorkQueue
    revision: int = 0
    lock: trio.Lock = attrs.field(factory=trio.Lock)
    wake: trio.Event = attrs.field(factory=trio.Event)
    app: AppSession | None = None
    cancellation: AgentCancellation | None = None
    pending: dict[str, PendingInteraction] = attrs.field(factory=dict)
    resolved: dict[str, Interaction] = attrs.field(factory=dict)
    finished: set[str] = attrs.field(factory=set)
    #: How each finished invocation ended (completed, failed, stopped, interrupted).
    outcomes: dict[str, str] = attrs.field(factory=dict)
    #: The latest main requests the session prepared (for context reports).
    requests: list[RequestRecord] = attrs.field(factory=list)
    #: A coordinator's workers: (worker session, first task's invocation, operation).
    workers: list[tuple[str, str, str]] = attrs.field(factory=list)
    subscribers: set[Subscriber] = attrs.field(factory=set)
    #: The newest row's position (None before the first): a watcher already past it
    #: needs no catch-up read.
    last_row: Position | None = None
    #: Where a forked session came from (wire form), and the tools it is narrowed to.
    branch: dict[str, Any] | None = None
    tools: tuple[str, ...] | None = None
    diagnostics: DiagnosticLog = attrs.field(factory=DiagnosticLog)
    diagnostics_changed: trio.Event = attrs.field(factory=trio.Event)
    #: The running invocation's live drafts, for live watchers (issue 15, live drafts).
    drafts: LiveDrafts = attrs.field(
        default=attrs.Factory(lambda state: LiveDrafts(state.subscribers), takes_self=True)
    )
