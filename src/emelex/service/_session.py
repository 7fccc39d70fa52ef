"""One session on this Host: its log's state, its lock, its watchers, its running turn.

:class:`HostSession` is the only writer of a session. :meth:`HostSession.commit` appends
events through the capability it was given (the store, or the cluster's fenced append),
applies each one with the reducer and publishes what changed; :meth:`HostSession.absorb`
applies events some other path already stored (recovery, another Host). Operations read
its state through read-only views and change it only by committing events.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs
import trio

from emelex.agent import AgentCancellation, ApprovalDecision, Approve, Deny
from emelex.app import Session as AppSession
from emelex.contracts import (
    HistoryRow,
    Interaction,
    InteractionsChanged,
    Position,
    QueueChanged,
    QueueEntry,
    QueueSnapshot,
    RowsPublished,
    SessionInfo,
    SettledInvocation,
    from_wire,
    trusted,
)
from emelex.service._diagnostics import DiagnosticLog
from emelex.service._drafts import LiveDrafts
from emelex.service._events import INTERACTION_RESOLVED, QUEUE_FINISHED
from emelex.service._queue import WorkQueue
from emelex.service._reducer import Change, RequestRecord, SessionLog, apply
from emelex.service._rows import history_row
from emelex.service._watch import SharedPages, Subscriber, rows_weight
from emelex.store import AppendResult, NewEvent, OperationRecord, StoredEvent

#: How a session's events reach the store: the store itself, or the cluster's append
#: that carries the lease (the caller holds the session's lock).
Appender = Callable[
    ["HostSession", Sequence[NewEvent], "OperationRecord | None"], Awaitable[AppendResult]
]


@attrs.define(eq=False)
class Waiter:
    """A running turn's approval waiting for its interaction's resolution."""

    answered: trio.Event = attrs.field(factory=trio.Event)
    decision: ApprovalDecision | None = None


def decision_of(interaction: Interaction) -> ApprovalDecision:
    resolution = interaction.resolution
    if resolution is not None and resolution.outcome == "approved":
        return Approve()
    reason = None if resolution is None else resolution.reason
    if reason is None:
        reason = "denied" if resolution is None else f"the approval was {resolution.outcome}"
    return Deny(reason)


class HostSession:
    """A session's state on this Host (see the module docs). The lock serialises its
    commits; whoever commits holds it."""

    def __init__(self, log: SessionLog, appender: Appender) -> None:
        self.log = log
        self._appender = appender
        self.lock = trio.Lock()
        #: Records written with the next commit (see :meth:`defer`).
        self._deferred: list[NewEvent] = []
        self.wake = trio.Event()
        self.app: AppSession | None = None
        #: The running turn's cancellation while this Host runs one.
        self.cancellation: AgentCancellation | None = None
        self.waiters: dict[str, Waiter] = {}
        self.subscribers: set[Subscriber] = set()
        #: Catch-up pages its watchers are reading (see _catch_up).
        self.pages = SharedPages()
        #: The newest published row's position (None before the first): a watcher
        #: already past it needs no catch-up read. Never past the applied events: a
        #: catch-up reads under the revision, and a later row is published when its
        #: event is applied.
        self.last_row: Position | None = None
        self.diagnostics_changed = trio.Event()
        #: The running invocation's live drafts, for live watchers.
        self.drafts = LiveDrafts(self.subscribers)

    # -- read-only views of the log ---------------------------------------------------
    @property
    def session_id(self) -> str:
        return self.log.session_id

    @property
    def agent_name(self) -> str:
        return self.log.agent_name

    @property
    def workspace(self) -> str:
        return self.log.workspace

    @property
    def title(self) -> str | None:
        return self.log.title

    @property
    def created_at(self) -> float:
        return self.log.created_at

    @property
    def branch(self) -> dict[str, Any] | None:
        return self.log.branch

    @property
    def tools(self) -> tuple[str, ...] | None:
        return self.log.tools

    @property
    def revision(self) -> int:
        return self.log.revision

    @property
    def history_revision(self) -> int:
        return self.log.history_revision

    def history_fence(self, through: int | None) -> int:
        """A history read's fence: ``through`` (None: the newest) clamped to the newest
        event. Title events after the newest history event publish no rows: the fence
        stays before them, so a title (or its failure) never moves the history fence."""
        fence = self.revision if through is None else min(through, self.revision)
        return min(fence, self.history_revision)

    @property
    def queue(self) -> WorkQueue:
        return self.log.queue

    @property
    def pending(self) -> dict[str, Interaction]:
        return self.log.pending

    @property
    def resolved(self) -> dict[str, Interaction]:
        return self.log.resolved

    @property
    def finished(self) -> set[str]:
        return self.log.finished

    @property
    def outcomes(self) -> dict[str, str]:
        return self.log.outcomes

    @property
    def requests(self) -> list[RequestRecord]:
        return self.log.requests

    @property
    def workers(self) -> list[tuple[str, str, str]]:
        return self.log.workers

    @property
    def diagnostics(self) -> DiagnosticLog:
        return self.log.diagnostics

    @property
    def next_sequence(self) -> int:
        """The sequence the first event of the next commit gets (deferred records go
        first)."""
        return self.log.revision + 1 + len(self._deferred)

    def requests_view(self) -> tuple[list[RequestRecord], int]:
        """The context records as of now, deferred ones included (applied by the same
        reducer to a scratch copy, at the sequences they will get), and that revision."""
        if not self._deferred:
            return self.log.requests, self.log.revision
        scratch = attrs.evolve(self.log, requests=[attrs.evolve(r) for r in self.log.requests])
        for sequence, event in enumerate(self._deferred, start=self.log.revision + 1):
            apply(scratch, sequence, event.kind, event.turn_id, event.payload)
        return scratch.requests, scratch.revision

    # -- writing ------------------------------------------------------------------------
    def defer(self, event: NewEvent) -> None:
        """Write ``event`` with this session's next commit (the caller holds the lock).
        For records whose loss in a crash harms nothing (a turn's request records): a
        turn's every commit, and its end, carries them."""
        self._deferred.append(event)

    async def flush(self) -> None:
        """Commit what waits for the next commit, if anything (the caller holds the
        lock); as :meth:`commit`."""
        if self._deferred:
            await self.commit(())

    async def commit(
        self, events: Sequence[NewEvent], operation: OperationRecord | None = None
    ) -> str | None:
        """Append ``events`` (the caller holds :attr:`lock`), apply them and publish.
        Returns the original receipt when ``operation`` was already applied (nothing is
        appended then), else None. Checkpoints; cancelled, the append either committed
        whole or not at all (the caller shields when it must know)."""
        batch = [*self._deferred, *events] if self._deferred else events
        result = await self._appender(self, batch, operation)
        if result.replayed:
            return result.receipt
        self._deferred.clear()
        events = batch
        changed = Change.NONE
        for sequence, event in zip(result.sequences, events, strict=True):
            changed |= apply(self.log, sequence, event.kind, event.turn_id, event.payload)
        self._publish_rows(result.sequences, events)
        self._react(changed, events)
        return None

    def absorb(self, events: Iterable[StoredEvent]) -> Change:
        """Apply events already in the store (recovery, or another Host's writes) and
        publish what changed but their rows (the caller reads those from the store)."""
        changed = Change.NONE
        applied = list(events)
        for event in applied:
            changed |= apply(self.log, event.sequence, event.kind, event.turn_id, event.payload)
        self._react(changed, applied)
        return changed

    def waiter(self, interaction_id: str) -> Waiter:
        """The waiter of a pending interaction this Host's turn asked (answered at once
        when the log already settled it)."""
        waiter = self.waiters.setdefault(interaction_id, Waiter())
        self._answer(interaction_id)
        return waiter

    # -- publishing ---------------------------------------------------------------------
    def _react(self, changed: Change, events: Sequence[NewEvent | StoredEvent]) -> None:
        for event in events:
            if event.kind == INTERACTION_RESOLVED:
                self._answer(str(event.payload["id"]))
            elif event.kind == QUEUE_FINISHED:
                # Right after the invocation's rows went out: they supersede its drafts.
                outcome = str(event.payload.get("outcome", "failed"))
                self.drafts.finish(str(event.payload["invocationId"]), outcome)
        if changed & Change.QUEUE:
            self.publish_queue()
        if changed & Change.INTERACTIONS:
            self.publish_interactions()
        if changed & Change.DIAGNOSTICS:
            done, self.diagnostics_changed = self.diagnostics_changed, trio.Event()
            done.set()
        if changed & Change.STOP:
            running = self.log.running
            if running in self.log.stopping and self.cancellation is not None:
                self.cancellation.cancel()

    def _answer(self, interaction_id: str) -> None:
        waiter = self.waiters.get(interaction_id)
        settled = self.log.resolved.get(interaction_id)
        if waiter is None or settled is None or waiter.answered.is_set():
            return
        waiter.decision = decision_of(settled)
        waiter.answered.set()
        del self.waiters[interaction_id]

    def _publish_rows(self, sequences: Sequence[int], events: Sequence[NewEvent]) -> None:
        published: list[HistoryRow] = []
        names: dict[str, str] = {}
        for sequence, event in zip(sequences, events, strict=True):
            for index, message in enumerate(event.rows):
                for call in message.tool_calls:
                    names[call.id] = call.name
                call_id = message.tool_call_id
                published.append(
                    history_row(
                        position=trusted(Position, source_sequence=sequence, item_index=index),
                        turn_id=event.turn_id or "",
                        role=message.role,
                        body=message.text,
                        thinking=message.reasoning,
                        calls=message.tool_calls,
                        tool_call_id=call_id,
                        tool_name=names.get(call_id) if call_id is not None else None,
                        internal=False,
                    )
                )
        if published:
            self.publish_rows(tuple(published))

    def publish_rows(self, rows: tuple[HistoryRow, ...]) -> None:
        """Hand rows just stored to the watchers (newest last)."""
        self.last_row = rows[-1].position
        if not self.subscribers:
            return
        update = RowsPublished(through=self.revision, rows=rows, next_after=rows[-1].position)
        weight = rows_weight(rows)
        for subscriber in tuple(self.subscribers):
            subscriber.offer(update, weight)

    def queue_snapshot(self) -> QueueSnapshot:
        # Built from the log's own checked queue: no construction checks (a snapshot
        # goes to every watcher after every change, and the queue may be long).
        return trusted(
            QueueSnapshot,
            session_id=self.session_id,
            revision=self.queue.revision,
            entries=tuple(
                trusted(
                    QueueEntry,
                    invocation_id=e.work.invocation_id,
                    operation=e.work.operation,
                    work=e.work.kind,
                    state=e.state,
                    admitted_sequence=e.work.admitted_sequence,
                )
                for e in self.queue.entries
            ),
            settled=tuple(
                trusted(
                    SettledInvocation,
                    invocation_id=s.invocation_id,
                    operation=s.operation,
                    work=s.work,
                    text=s.text,
                    text_clipped=s.clipped,
                    outcome=s.outcome,
                    started=s.started,
                    finished_sequence=s.finished_sequence,
                    stop_operation=s.stop_operation,
                    finished_at_ms=s.finished_at_ms,
                )
                for s in self.log.settled
            ),
        )

    def publish_queue(self) -> None:
        if not self.subscribers:
            return
        update = trusted(QueueChanged, kind="queue", queue=self.queue_snapshot())
        for subscriber in tuple(self.subscribers):
            subscriber.offer(update)

    def publish_interactions(self) -> None:
        if not self.subscribers:
            return
        update = InteractionsChanged(pending=tuple(self.pending.values()))
        for subscriber in tuple(self.subscribers):
            subscriber.offer(update)

    def info(self) -> SessionInfo:
        return from_wire(
            SessionInfo,
            {
                "id": self.session_id,
                "agent": self.agent_name,
                "title": self.title,
                "workspace": self.workspace,
                "branch": self.branch,
                "state": "running" if self.queue.running is not None else "idle",
                "revision": self.revision,
                "createdAtMs": int(self.created_at * 1000),
            },
        )
