"""The Host: one process owning the store and the engine, driven through operations.

Every mutation is made durable before it is answered: the event that records it and the
receipt of its operation reference commit in one store transaction, so a retried request
returns the original receipt and is never applied twice. Each session has a work queue
and one runner task that takes its invocations in order and runs them as turns; a turn's
rows, the end of its invocation and the settlement of its interactions commit together.
"""

from __future__ import annotations

import json
import os
import pathlib
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from emelex._errors import EmelexError
from emelex._ids import new_id
from emelex.agent import (
    AgentCancellation,
    AgentError,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    Deny,
)
from emelex.app import Agent, Engine
from emelex.app import Session as AppSession
from emelex.contracts import (
    MAX_PAGE_SIZE,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    ApproveResponse,
    CreateSessionReceipt,
    DenyResponse,
    HistoryPage,
    HistoryRow,
    Interaction,
    InteractionResponse,
    InteractionsChanged,
    OperationReceipt,
    PendingInteractions,
    Position,
    QueueChanged,
    QueueEntry,
    QueueSnapshot,
    Resolution,
    RespondReceipt,
    RowsPublished,
    SearchHit,
    SearchPage,
    SendReceipt,
    SessionInfo,
    StopReceipt,
    ToolCallInfo,
    WatchUpdate,
    find_matches,
    from_wire,
    to_wire,
    trusted,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    HostClosed,
    InteractionSettled,
    OperationConflict,
    QueueFull,
    ServiceError,
    UnknownAgent,
    UnknownInteraction,
    UnknownInvocation,
    UnknownSession,
)
from emelex.service._queue import Work, WorkQueue
from emelex.service._rows import store_position, wire_position, wire_row
from emelex.service._watch import DEFAULT_WATCH_BUFFER, Subscriber
from emelex.store import (
    NewEvent,
    OperationRecord,
    SessionExists,
    SqliteStore,
    open_sqlite_store,
    turn_events,
)
from emelex.store import OperationConflict as StoreOperationConflict

#: Unfinished invocations one session's queue holds.
DEFAULT_QUEUE_CAPACITY: Final = 64
#: Rows a search scans per page (a page may carry no hit and still advance).
SEARCH_ROWS_PER_PAGE: Final = 200
_SESSION_NAMESPACE: Final = uuid.UUID("5f0c1c3e-8a43-4f55-9b53-2f7b8f0e6a10")

# Event kinds the Host appends beside the turn events of emelex.store.
SESSION_CREATED: Final = "session.created"
QUEUE_ADMITTED: Final = "queue.admitted"
QUEUE_STARTED: Final = "queue.started"
QUEUE_FINISHED: Final = "queue.finished"
INTERACTION_REQUESTED: Final = "interaction.requested"
INTERACTION_RESOLVED: Final = "interaction.resolved"


def _before(cursor: Position | None, newest: Position | None) -> bool:
    """Whether rows exist after ``cursor`` (``newest`` is the newest row's position)."""
    if newest is None:
        return False
    if cursor is None:
        return True
    return (cursor.source_sequence, cursor.item_index) < (
        newest.source_sequence,
        newest.item_index,
    )


def _resolved(interaction: Interaction, resolution: Resolution) -> Interaction:
    wire = to_wire(interaction)
    wire.update(state="resolved", resolution=to_wire(resolution))
    return from_wire(Interaction, wire)


def _receipt(operation: str, action: str, session_id: str, sequence: int) -> OperationReceipt:
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
class _Pending:
    interaction: Interaction
    answered: trio.Event = attrs.field(factory=trio.Event)
    decision: ApprovalDecision | None = None


class _HostApprovals:
    """The approval policy of every Host session: each request becomes a durable
    interaction that a client answers with ``respond`` (possibly after reconnecting)."""

    def __init__(self, host: Host, state: _SessionState) -> None:
        self._host = host
        self._state = state

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        state = self._state
        running = state.queue.running
        if running is None:
            return Deny("no invocation is running")
        interaction_id = new_id()
        async with state.lock:
            sequence = state.revision + 1
            interaction = from_wire(
                Interaction,
                {
                    "id": interaction_id,
                    "sessionId": state.session_id,
                    "invocationId": running.work.invocation_id,
                    "turnId": context.turn_id,
                    "toolCall": to_wire(
                        ToolCallInfo(
                            id=context.call.id,
                            name=context.call.name,
                            arguments=dict(context.call.arguments),
                        )
                    ),
                    "reason": context.reason[:4096],
                    "state": "pending",
                    "requestedSequence": sequence,
                    "resolution": None,
                },
            )
            await self._host._append(
                state,
                [NewEvent(INTERACTION_REQUESTED, context.turn_id, to_wire(interaction))],
            )
            pending = _Pending(interaction)
            state.pending[interaction_id] = pending
        self._host._publish_interactions(state)
        await pending.answered.wait()
        assert pending.decision is not None
        return pending.decision


@attrs.define
class _SessionState:
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
    pending: dict[str, _Pending] = attrs.field(factory=dict)
    resolved: dict[str, Interaction] = attrs.field(factory=dict)
    finished: set[str] = attrs.field(factory=set)
    subscribers: set[Subscriber] = attrs.field(factory=set)
    #: The newest row's position (None before the first): a watcher already past it
    #: needs no catch-up read.
    last_row: Position | None = None


class Host:
    """The agent service in this process. Open with :meth:`Host.open`.

    Every operation is async and checkpoints. Mutations (``create_session``, ``send``,
    ``stop``, ``respond``) take a caller-chosen ``operation`` reference: retrying one with
    the same reference and request returns the original receipt; the same reference with
    another request raises :class:`OperationConflict`. A cancelled mutation either
    committed whole or not at all (retry it with its reference to learn which).
    """

    def __init__(
        self,
        root: pathlib.Path,
        store: SqliteStore,
        engine: Engine,
        agents: Mapping[str, Agent],
        nursery: trio.Nursery,
        *,
        queue_capacity: int,
        watch_buffer: int,
    ) -> None:
        self.root = root
        self._store = store
        self._engine = engine
        self._agents = dict(agents)
        self._nursery = nursery
        self._queue_capacity = queue_capacity
        self._watch_buffer = watch_buffer
        self._sessions: dict[str, _SessionState] = {}
        self._closed = False

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        root: str | os.PathLike[str],
        *,
        agents: Mapping[str, Agent],
        engine: Engine | None = None,
        queue_capacity: int = DEFAULT_QUEUE_CAPACITY,
        watch_buffer: int = DEFAULT_WATCH_BUFFER,
    ) -> AsyncIterator[Host]:
        """Open the Host whose state lives under ``root`` (created 0700), recover every
        stored session, and run until the block exits (running turns are then cancelled
        and settled by the harness rules)."""
        path = pathlib.Path(root)
        await trio.Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in agents:
            if not isinstance(agents[name], Agent):
                raise TypeError(f"agent {name!r} is not an emelex Agent")
        async with open_sqlite_store(str(path / "host.db")) as store:
            own_engine = engine is None
            active = Engine() if engine is None else engine
            try:
                async with trio.open_nursery() as nursery:
                    host = cls(
                        path,
                        store,
                        active,
                        agents,
                        nursery,
                        queue_capacity=queue_capacity,
                        watch_buffer=watch_buffer,
                    )
                    await host._recover()
                    try:
                        yield host
                    finally:
                        host._begin_close()
            finally:
                with trio.CancelScope(shield=True):
                    for state in host._sessions.values():
                        if state.app is not None:
                            await state.app.aclose()
                    if own_engine:
                        await active.aclose()

    # -- sessions ---------------------------------------------------------------------------
    async def create_session(
        self,
        agent: str,
        workspace: str | os.PathLike[str],
        *,
        operation: str,
        title: str | None = None,
    ) -> CreateSessionReceipt:
        """Create a session of the named agent on ``workspace`` (an existing directory).
        The session id follows from the operation reference, so a retry finds it."""
        self._check_open()
        directory = str(await trio.Path(workspace).resolve())
        body = {"agent": agent, "workspace": directory, "title": title}
        digest = operation_digest("createSession", body)
        session_id = "s-" + uuid.uuid5(_SESSION_NAMESPACE, operation).hex
        if session_id not in self._sessions:
            if agent not in self._agents:
                raise UnknownAgent(f"the Host knows no agent named {agent!r}")
            if not await trio.Path(directory).is_dir():
                raise ServiceError(f"workspace {directory} is not a directory")
        receipt = _receipt(operation, "createSession", session_id, 1)
        config = {"host": True, **body}
        try:
            await self._store.create_session(
                session_id,
                "{}",
                config,
                events=[NewEvent(SESSION_CREATED, None, dict(body))],
                operation=OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
            )
        except SessionExists:
            try:
                original = await self._store.find_operation(session_id, operation, digest)
            except StoreOperationConflict as exc:
                raise OperationConflict(str(exc)) from exc
            if original is None:
                raise OperationConflict(
                    f"operation {operation!r} names another session's creation"
                ) from None
            receipt = from_wire(OperationReceipt, json.loads(original))
        else:
            self._sessions[session_id] = self._new_state(session_id, config, created_at=time.time())
            self._sessions[session_id].revision = 1
            self._start_runner(self._sessions[session_id])
        return CreateSessionReceipt(session=self._info(self._state(session_id)), receipt=receipt)

    def sessions(self) -> tuple[SessionInfo, ...]:
        return tuple(self._info(state) for state in self._sessions.values())

    def _info(self, state: _SessionState) -> SessionInfo:
        return from_wire(
            SessionInfo,
            {
                "id": state.session_id,
                "agent": state.agent_name,
                "title": state.title,
                "workspace": state.workspace,
                "branch": None,
                "state": "running" if state.queue.running is not None else "idle",
                "revision": state.revision,
                "createdAtMs": int(state.created_at * 1000),
            },
        )

    # -- send and stop ----------------------------------------------------------------------
    async def send(self, session_id: str, text: str, *, operation: str) -> SendReceipt:
        """Admit ``text`` to the session's queue. Raises :class:`QueueFull` (nothing is
        admitted) when the queue is full."""
        state = self._state(session_id)
        if not text or len(text) > MAX_TEXT_CHARS:
            raise ServiceError(f"send text must hold 1 to {MAX_TEXT_CHARS} characters")
        digest = operation_digest("send", {"sessionId": session_id, "text": text})
        async with state.lock:
            try:
                state.queue.check_room()
            except QueueFull:
                # A retry of an admitted send still gets its receipt from a full queue.
                original = await self._find(state, operation, digest)
                if original is not None:
                    return from_wire(SendReceipt, original)
                raise
            self._check_open()
            invocation_id = new_id()
            sequence = state.revision + 1
            receipt = SendReceipt(
                invocation_id=invocation_id,  # type: ignore[arg-type]
                receipt=_receipt(operation, "send", session_id, sequence),
            )
            payload = {"invocationId": invocation_id, "operation": operation, "text": text}
            # One store round trip: the replay check happens inside the append.
            replayed = await self._append(
                state,
                [NewEvent(QUEUE_ADMITTED, None, payload)],
                OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
            )
            if replayed is not None:
                return from_wire(SendReceipt, json.loads(replayed))
            state.queue.admit(Work(invocation_id, operation, text, sequence))
        self._publish_queue(state)
        state.wake.set()
        return receipt

    async def stop(self, session_id: str, invocation_id: str, *, operation: str) -> StopReceipt:
        """Stop one invocation: a queued one leaves the queue; a running one is cancelled
        and settled by the harness rules (``stopping``); a finished one is left alone."""
        state = self._state(session_id)
        digest = operation_digest("stop", {"sessionId": session_id, "invocationId": invocation_id})
        async with state.lock:
            original = await self._find(state, operation, digest)
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
                receipt=_receipt(operation, "stop", session_id, state.revision + 1),
            )
            events = []
            if outcome == "removedFromQueue":
                events.append(
                    NewEvent(
                        QUEUE_FINISHED,
                        None,
                        {"invocationId": invocation_id, "outcome": "stopped"},
                    )
                )
            else:
                events.append(NewEvent("queue.stop", None, {"invocationId": invocation_id}))
            await self._append(
                state, events, OperationRecord(operation, digest, json.dumps(to_wire(receipt)))
            )
            if outcome == "removedFromQueue":
                state.queue.remove(invocation_id)
                state.finished.add(invocation_id)
            elif outcome == "stopping" and state.cancellation is not None:
                state.cancellation.cancel()
        self._publish_queue(state)
        return receipt

    def queue(self, session_id: str) -> QueueSnapshot:
        return self._queue_snapshot(self._state(session_id))

    # -- interactions -------------------------------------------------------------------
    async def pending_interactions(self, session_id: str) -> PendingInteractions:
        state = self._state(session_id)
        return PendingInteractions(
            session_id=session_id,  # type: ignore[arg-type]
            interactions=tuple(p.interaction for p in state.pending.values()),
        )

    async def interaction(self, session_id: str, interaction_id: str) -> Interaction:
        state = self._state(session_id)
        if interaction_id in state.pending:
            return state.pending[interaction_id].interaction
        if interaction_id in state.resolved:
            return state.resolved[interaction_id]
        raise UnknownInteraction(f"session {session_id} has no interaction {interaction_id}")

    async def respond(
        self,
        session_id: str,
        interaction_id: str,
        response: InteractionResponse,
        *,
        operation: str,
    ) -> RespondReceipt:
        """Answer a pending interaction (approve runs the call once; deny tells the model
        why). An interaction already answered or settled raises
        :class:`InteractionSettled`."""
        state = self._state(session_id)
        if not isinstance(response, ApproveResponse | DenyResponse):
            raise TypeError("respond needs an ApproveResponse or a DenyResponse")
        body = {"sessionId": session_id, "interactionId": interaction_id, **to_wire(response)}
        digest = operation_digest("respond", body)
        async with state.lock:
            original = await self._find(state, operation, digest)
            if original is not None:
                return from_wire(RespondReceipt, original)
            pending = state.pending.get(interaction_id)
            if pending is None:
                if interaction_id in state.resolved:
                    raise InteractionSettled(f"interaction {interaction_id} is already settled")
                raise UnknownInteraction(
                    f"session {session_id} has no interaction {interaction_id}"
                )
            sequence = state.revision + 1
            approved = isinstance(response, ApproveResponse)
            resolved = _resolved(
                pending.interaction,
                Resolution(
                    outcome="approved" if approved else "denied",
                    by="client",
                    reason=None if approved else response.reason,  # type: ignore[union-attr]
                    sequence=sequence,
                ),
            )
            receipt = RespondReceipt(
                interaction=resolved,
                receipt=_receipt(operation, "respond", session_id, sequence),
            )
            await self._append(
                state,
                [NewEvent(INTERACTION_RESOLVED, resolved.turn_id, to_wire(resolved))],
                OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
            )
            del state.pending[interaction_id]
            state.resolved[interaction_id] = resolved
            pending.decision = Approve() if approved else Deny(response.reason)  # type: ignore[union-attr]
            pending.answered.set()
        self._publish_interactions(state)
        return receipt

    # -- reading ------------------------------------------------------------------------
    async def history(
        self,
        session_id: str,
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
    ) -> HistoryPage:
        """A page of rows after ``after`` under the fence ``through`` (None: the newest
        event; pass the returned fence back unchanged while following ``next_after``)."""
        self._state(session_id)
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ServiceError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        page = await self._store.history_page(
            session_id,
            through=through,
            after=None if after is None else store_position(after),
            limit=limit,
        )
        return HistoryPage(
            session_id=session_id,  # type: ignore[arg-type]
            through=page.through,
            rows=tuple(wire_row(r) for r in page.rows),
            next_after=None if page.next_after is None else wire_position(page.next_after),
        )

    async def read_row(
        self, session_id: str, position: Position, *, through: int | None = None
    ) -> HistoryRow | None:
        """One row by position (hidden internal rows too) if published under the fence."""
        self._state(session_id)
        row = await self._store.read_row(session_id, store_position(position), through=through)
        return None if row is None else wire_row(row)

    async def search(
        self,
        session_id: str,
        query: str,
        *,
        case_sensitive: bool = False,
        whole_word: bool = False,
        through: int | None = None,
        after: Position | None = None,
    ) -> SearchPage:
        """Hits of a literal ``query`` in up to one page of rows after ``after`` under the
        fence; a page may hold no hit while ``next_after`` is not None."""
        self._state(session_id)
        if not query or len(query) > MAX_QUERY_CHARS:
            raise ServiceError(f"a search query holds 1 to {MAX_QUERY_CHARS} characters")
        page = await self._store.history_page(
            session_id,
            through=through,
            after=None if after is None else store_position(after),
            limit=SEARCH_ROWS_PER_PAGE,
        )
        hits: list[SearchHit] = []
        for row in page.rows:
            position = wire_position(row.position)
            fields = [("body", row.fields.body), ("thinking", row.fields.thinking or "")]
            fields += [
                ("toolArguments", json.dumps(call.arguments, ensure_ascii=False))
                for call in row.tool_calls
            ]
            for name, value in fields:
                for start, end in find_matches(
                    value, query, case_sensitive=case_sensitive, whole_word=whole_word
                ):
                    hits.append(
                        SearchHit(position=position, field=name, start=start, end=end)  # type: ignore[arg-type]
                    )
            await trio.lowlevel.checkpoint()
        return SearchPage(
            through=page.through,
            hits=tuple(hits),
            next_after=None if page.next_after is None else wire_position(page.next_after),
        )

    @asynccontextmanager
    async def watch(
        self, session_id: str, *, after: Position | None = None
    ) -> AsyncIterator[AsyncIterator[WatchUpdate]]:
        """Subscribe to new rows after ``after`` (a page's ``next_after``), queue changes
        and pending-interaction changes. The stream first catches up from the store, then
        follows live commits; a watcher that falls ``watch_buffer`` updates behind ends
        with ``WatchEnded(reason="lagged", resume_after=...)``: watch again from there."""
        state = self._state(session_id)
        subscriber = Subscriber(after, self._watch_buffer)
        state.subscribers.add(subscriber)
        stream = self._watch_stream(state, subscriber)
        try:
            yield stream
        finally:
            state.subscribers.discard(subscriber)
            await stream.aclose()

    async def _watch_stream(
        self, state: _SessionState, subscriber: Subscriber
    ) -> AsyncGenerator[WatchUpdate, None]:
        yield QueueChanged(queue=self._queue_snapshot(state))
        yield InteractionsChanged(pending=tuple(p.interaction for p in state.pending.values()))
        while not subscriber.ended and _before(subscriber.delivered, state.last_row):
            page = await self.history(state.session_id, after=subscriber.delivered)
            caught_up = RowsPublished(through=page.through, rows=page.rows, next_after=None)
            fresh = subscriber.fresh_rows(caught_up) if page.rows else None
            if fresh is not None:
                yield fresh
            if page.next_after is None:
                break
        while (update := await subscriber.receive()) is not None:
            yield update

    # -- internals --------------------------------------------------------------------------
    def _begin_close(self) -> None:
        """Stop taking work; cancel running turns through their AgentCancellation so the
        harness settles them (checkpoint or rollback) and the Host records that before
        its runners return."""
        self._closed = True
        for state in self._sessions.values():
            for subscriber in state.subscribers:
                subscriber.end("closed")
            if state.cancellation is not None:
                state.cancellation.cancel()
            state.wake.set()

    def _check_open(self) -> None:
        if self._closed:
            raise HostClosed("the Host is closed")

    def _state(self, session_id: str) -> _SessionState:
        try:
            return self._sessions[session_id]
        except KeyError:
            raise UnknownSession(f"the Host has no session {session_id!r}") from None

    def _new_state(
        self, session_id: str, config: dict[str, Any], *, created_at: float
    ) -> _SessionState:
        return _SessionState(
            session_id=session_id,
            agent_name=str(config["agent"]),
            workspace=str(config["workspace"]),
            title=config.get("title"),
            created_at=created_at,
            queue=WorkQueue(self._queue_capacity),
        )

    async def _find(self, state: _SessionState, operation: str, digest: str) -> Any:
        try:
            original = await self._store.find_operation(state.session_id, operation, digest)
        except StoreOperationConflict as exc:
            raise OperationConflict(
                f"operation {operation!r} was already used for a different request"
            ) from exc
        return None if original is None else json.loads(original)

    async def _append(
        self,
        state: _SessionState,
        events: list[NewEvent],
        operation: OperationRecord | None = None,
    ) -> str | None:
        """Append under the session's lock (held by the caller); rows go to watchers.
        Returns the original receipt when ``operation`` was already applied (nothing is
        appended then), else None."""
        try:
            result = await self._store.append_events(state.session_id, events, operation=operation)
        except StoreOperationConflict as exc:
            raise OperationConflict(
                f"operation {exc.reference!r} was already used for a different request"
            ) from exc
        if result.replayed:
            return result.receipt
        state.revision = result.sequences[-1]
        published: list[HistoryRow] = []
        names: dict[str, str] = {}
        for sequence, event in zip(result.sequences, events, strict=True):
            for index, message in enumerate(event.rows):
                for call in message.tool_calls:
                    names[call.id] = call.name
                published.append(
                    trusted(
                        HistoryRow,
                        position=trusted(Position, source_sequence=sequence, item_index=index),
                        turn_id=event.turn_id or "",
                        role=message.role,
                        body=message.text,
                        thinking=message.reasoning,
                        tool_calls=tuple(
                            trusted(ToolCallInfo, id=c.id, name=c.name, arguments=c.arguments)
                            for c in message.tool_calls
                        ),
                        tool_call_id=message.tool_call_id,
                        tool_name=names.get(message.tool_call_id or "")
                        if message.tool_call_id
                        else None,
                        internal=False,
                    )
                )
        if published:
            state.last_row = published[-1].position
            update = RowsPublished(
                through=state.revision, rows=tuple(published), next_after=published[-1].position
            )
            for subscriber in tuple(state.subscribers):
                subscriber.offer(update)
        return None

    def _queue_snapshot(self, state: _SessionState) -> QueueSnapshot:
        return QueueSnapshot(
            session_id=state.session_id,  # type: ignore[arg-type]
            revision=state.queue.revision,
            entries=tuple(
                QueueEntry(
                    invocation_id=e.work.invocation_id,  # type: ignore[arg-type]
                    operation=e.work.operation,  # type: ignore[arg-type]
                    work=e.work.kind,
                    state=e.state,
                    admitted_sequence=e.work.admitted_sequence,
                )
                for e in state.queue.entries
            ),
        )

    def _publish_queue(self, state: _SessionState) -> None:
        update = QueueChanged(queue=self._queue_snapshot(state))
        for subscriber in tuple(state.subscribers):
            subscriber.offer(update)

    def _publish_interactions(self, state: _SessionState) -> None:
        update = InteractionsChanged(pending=tuple(p.interaction for p in state.pending.values()))
        for subscriber in tuple(state.subscribers):
            subscriber.offer(update)

    # -- running work -------------------------------------------------------------------
    def _start_runner(self, state: _SessionState) -> None:
        self._nursery.start_soon(self._run_session, state, name=f"host-session-{state.session_id}")

    async def _run_session(self, state: _SessionState) -> None:
        while not self._closed:
            work = state.queue.next_to_run()
            if work is None:
                state.wake = trio.Event()
                await state.wake.wait()
                continue
            async with state.lock:
                await self._append(
                    state,
                    [NewEvent(QUEUE_STARTED, None, {"invocationId": work.invocation_id})],
                )
                state.queue.start(work.invocation_id)
                state.cancellation = AgentCancellation()
            self._publish_queue(state)
            await self._run_turn(state, work, state.cancellation)

    async def _app_session(self, state: _SessionState) -> AppSession:
        if state.app is None:
            agent = attrs.evolve(
                self._agents[state.agent_name],
                approver=_HostApprovals(self, state),
                workspace=pathlib.Path(state.workspace),
            )
            stored = await self._store.load_session(state.session_id)
            state.app = (
                await self._engine.create(agent)
                .session_id(state.session_id)
                .history(stored.messages)
                .start()
            )
        return state.app

    async def _run_turn(
        self, state: _SessionState, work: Work, cancellation: AgentCancellation
    ) -> None:
        turn_id = new_id()
        outcome = "completed"
        error: dict[str, Any] | None = None
        try:
            app = await self._app_session(state)
            turn = await app.send_and_wait(work.text, cancellation=cancellation)
            events = turn_events(turn.turn_id, turn.messages)
            turn_id = turn.turn_id
        except AgentError as exc:
            outcome = "stopped" if cancellation.cancelled else "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            if exc.rolled_back is False:
                events = turn_events(turn_id, exc.checkpoint, outcome="checkpointed")
            else:
                events = turn_events(turn_id, (), outcome="rolled_back")
        except EmelexError as exc:
            # The session could not start (an integration failed, the agent is invalid):
            # nothing ran, so nothing is committed.
            outcome = "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            events = turn_events(turn_id, (), outcome="rolled_back")
        with trio.CancelScope(shield=True):
            async with state.lock:
                settled = self._settle_interactions(state, work.invocation_id, "stop")
                finished: dict[str, Any] = {
                    "invocationId": work.invocation_id,
                    "outcome": outcome,
                }
                if error is not None:
                    finished["error"] = error
                await self._append(
                    state, [*events, *settled, NewEvent(QUEUE_FINISHED, turn_id, finished)]
                )
                state.queue.remove(work.invocation_id)
                state.finished.add(work.invocation_id)
                state.cancellation = None
        self._publish_queue(state)
        self._publish_interactions(state)

    def _settle_interactions(
        self, state: _SessionState, invocation_id: str, by: str
    ) -> list[NewEvent]:
        """Interactions of an ended invocation that were never answered: settled as
        interrupted (the question is never asked again)."""
        events = []
        for interaction_id, pending in tuple(state.pending.items()):
            if pending.interaction.invocation_id != invocation_id:
                continue
            resolved = _resolved(
                pending.interaction,
                Resolution(
                    outcome="interrupted",
                    by=by,  # type: ignore[arg-type]
                    reason=None,
                    sequence=state.revision + 1,
                ),
            )
            del state.pending[interaction_id]
            state.resolved[interaction_id] = resolved
            events.append(NewEvent(INTERACTION_RESOLVED, resolved.turn_id, to_wire(resolved)))
        return events

    # -- recovery -----------------------------------------------------------------------
    async def _recover(self) -> None:
        """Rebuild every stored session's queue and interactions from its event log and
        settle what a previous Host left unfinished: an invocation that had started is
        ended as interrupted (its turn rolled back, its interactions settled by
        ``restart``); queued ones keep their place."""
        for summary in await self._store.list_sessions():
            stored_config = await self._session_config(summary.id)
            if stored_config is None:
                continue
            state = self._new_state(summary.id, stored_config, created_at=summary.created_at)
            started: set[str] = set()
            after = 0
            while True:
                events = await self._store.events_after(summary.id, after, limit=1000)
                if not events:
                    break
                for event in events:
                    self._replay(state, event.kind, event.payload, event.sequence, started)
                after = events[-1].sequence
            state.revision = after
            newest = await self._store.last_position(summary.id)
            state.last_row = None if newest is None else wire_position(newest)
            self._sessions[summary.id] = state
            interrupted = [i for i in started if i in state.queue]
            for invocation_id in interrupted:
                state.queue.remove(invocation_id)
                settled = self._settle_interactions(state, invocation_id, "restart")
                turn_id = new_id()
                await self._append(
                    state,
                    [
                        *turn_events(turn_id, (), outcome="rolled_back"),
                        *settled,
                        NewEvent(
                            QUEUE_FINISHED,
                            turn_id,
                            {"invocationId": invocation_id, "outcome": "interrupted"},
                        ),
                    ],
                )
                state.finished.add(invocation_id)
            self._start_runner(state)

    async def _session_config(self, session_id: str) -> dict[str, Any] | None:
        stored = await self._store.load_config(session_id)
        if not stored.get("host") or stored.get("agent") not in self._agents:
            return None
        return stored

    @staticmethod
    def _replay(
        state: _SessionState,
        kind: str,
        payload: dict[str, Any],
        sequence: int,
        started: set[str],
    ) -> None:
        if kind == QUEUE_ADMITTED:
            state.queue.admit(
                Work(payload["invocationId"], payload["operation"], payload["text"], sequence)
            )
        elif kind == QUEUE_STARTED:
            started.add(payload["invocationId"])
        elif kind == QUEUE_FINISHED:
            invocation_id = payload["invocationId"]
            if invocation_id in state.queue:
                state.queue.remove(invocation_id)
            state.finished.add(invocation_id)
            started.discard(invocation_id)
        elif kind == INTERACTION_REQUESTED:
            interaction = from_wire(Interaction, payload)
            state.pending[interaction.id] = _Pending(interaction)
        elif kind == INTERACTION_RESOLVED:
            interaction = from_wire(Interaction, payload)
            state.pending.pop(interaction.id, None)
            state.resolved[interaction.id] = interaction
