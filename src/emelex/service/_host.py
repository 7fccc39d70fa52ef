"""The Host: one process owning the store and the engine, driven through operations.

Every mutation is made durable before it is answered: the event that records it and the
receipt of its operation reference commit in one store transaction, so a retried request
returns the original receipt and is never applied twice. Each session has a work queue
and one runner task that takes its invocations in order and runs them as turns; a turn's
rows, the end of its invocation and the settlement of its interactions commit together.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import shutil
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import attrs
import trio

from emelex._errors import EmelexError
from emelex._ids import new_id
from emelex._text import clip
from emelex.agent import (
    AgentCancellation,
    AgentError,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    Deny,
    current_turn,
)
from emelex.app import Agent, Engine
from emelex.app import Session as AppSession
from emelex.contracts import (
    MAX_ATTACHMENT_BYTES,
    MAX_PAGE_SIZE,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    MAX_WORKERS,
    AgentWorker,
    ApproveResponse,
    AttachmentMeta,
    Branch,
    ContextReport,
    CreateSessionReceipt,
    DenyResponse,
    Diagnostic,
    DiagnosticsPage,
    DiagnosticsRevision,
    ExecuteReceipt,
    ExecuteResult,
    ForkReceipt,
    ForkWorker,
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
    WorkerReceipt,
    WorkerStatus,
    WorkHubSnapshot,
    from_wire,
    to_wire,
    trusted,
)
from emelex.model import (
    Client,
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    from_json,
)
from emelex.model import to_json as to_json_message
from emelex.service._attachments import check_metadata, extract
from emelex.service._context import RecordingModel, prepared_request, summarize
from emelex.service._diagnostics import (
    DIAGNOSTIC_RECORDED,
    DiagnosticLog,
    classify,
    diagnostic,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    ForkRefused,
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
from emelex.service._rows import history_row, page_row, store_position, wire_position, wire_row
from emelex.service._searching import match_rows
from emelex.service._watch import DEFAULT_WATCH_BUFFER, Subscriber
from emelex.store import (
    TURN_SETTLED,
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
#: How long the automatic title call of a session may take.
TITLE_SECONDS: Final = 60.0
_SESSION_NAMESPACE: Final = uuid.UUID("5f0c1c3e-8a43-4f55-9b53-2f7b8f0e6a10")

# Event kinds the Host appends beside the turn events of emelex.store.
SESSION_CREATED: Final = "session.created"
QUEUE_ADMITTED: Final = "queue.admitted"
QUEUE_STARTED: Final = "queue.started"
QUEUE_FINISHED: Final = "queue.finished"
INTERACTION_REQUESTED: Final = "interaction.requested"
INTERACTION_RESOLVED: Final = "interaction.resolved"
#: Before each tool call may start: what the turn commits if the Host is lost then.
TURN_JOURNAL: Final = "turn.journal"
#: A main model request was prepared, and how it ended (context reports).
REQUEST_PREPARED: Final = "request.prepared"
REQUEST_SETTLED: Final = "request.settled"
#: Prepared requests a session keeps in memory for context reports.
MAX_REQUESTS_KEPT: Final = 64
#: A coordinator started a worker session (WorkHub).
WORKER_STARTED: Final = "workhub.worker"
#: The automatic title of a session (or a title failure, as a diagnostic).
SESSION_TITLED: Final = "session.titled"


def _fork_id(session_id: str, operation: str) -> str:
    """A fork's session id follows from its source and operation, so a retry finds it."""
    return "s-" + uuid.uuid5(_SESSION_NAMESPACE, f"fork\0{session_id}\0{operation}").hex


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
class _Request:
    """One prepared main request: its event, summary and (once known) its end."""

    sequence: int
    payload: dict[str, Any]
    settled_at: int | None = None
    state: str = "running"
    tokens: int | None = None

    def settle(self, settled_at: int, state: str, tokens: int | None) -> None:
        self.settled_at, self.state, self.tokens = settled_at, state, tokens


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
    #: How each finished invocation ended (completed, failed, stopped, interrupted).
    outcomes: dict[str, str] = attrs.field(factory=dict)
    #: The latest main requests the session prepared (for context reports).
    requests: list[_Request] = attrs.field(factory=list)
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
        titles: bool = False,
        max_attachment_bytes: int = MAX_ATTACHMENT_BYTES,
    ) -> None:
        self.root = root
        self._titles = titles
        self._max_attachment_bytes = max_attachment_bytes
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
        titles: bool = False,
        max_attachment_bytes: int = MAX_ATTACHMENT_BYTES,
    ) -> AsyncIterator[Host]:
        """Open the Host whose state lives under ``root`` (created 0700), recover every
        stored session, and run until the block exits (running turns are then cancelled
        and settled by the harness rules). With ``titles``, a session without a title
        gets one from a short call of its agent's model after its first completed turn
        (at most ``TITLE_SECONDS``); a failure there is a diagnostic, never a turn
        failure."""
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
                        titles=titles,
                        max_attachment_bytes=max_attachment_bytes,
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
            await self._store_new_session(
                session_id,
                config,
                [NewEvent(SESSION_CREATED, None, dict(body))],
                operation,
                digest,
                receipt,
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
                "branch": state.branch,
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

    # -- the Executor -------------------------------------------------------------------
    async def execute(
        self,
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
        self._check_open()
        if agent not in self._agents:
            raise UnknownAgent(f"the Host knows no agent named {agent!r}")
        if not text or len(text) > MAX_TEXT_CHARS:
            raise ServiceError(f"a task holds 1 to {MAX_TEXT_CHARS} characters")
        metas = tuple(attachments)
        check_metadata(metas, self._max_attachment_bytes)
        body = {"agent": agent, "text": text, "attachments": [to_wire(m) for m in metas]}
        digest = operation_digest("execute", body)
        session_id = "s-" + uuid.uuid5(_SESSION_NAMESPACE, f"execute\0{operation}").hex
        if session_id in self._sessions:
            original = await self._find(self._sessions[session_id], operation, digest)
            if original is None:
                raise OperationConflict(f"operation {operation!r} named another request")
            return from_wire(ExecuteReceipt, original)
        workspace = self.root / "executor" / session_id
        await trio.Path(workspace).mkdir(mode=0o700, parents=True)
        try:
            await extract(resource, metas, str(workspace), limit=self._max_attachment_bytes)
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
                receipt=_receipt(operation, "execute", session_id, len(events)),
            )
            await self._store_new_session(session_id, config, events, operation, digest, receipt)
        except BaseException:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(
                    functools.partial(shutil.rmtree, workspace, ignore_errors=True)
                )
            raise
        state = self._new_state(session_id, config, created_at=time.time())
        state.revision = len(events)
        state.queue.admit(Work(invocation_id, operation, text, 2, kind="execute"))
        self._sessions[session_id] = state
        self._start_runner(state)
        state.wake.set()
        return receipt

    async def execute_result(self, session_id: str, invocation_id: str) -> ExecuteResult | None:
        """How an Executor task ended, or None while it is queued or running."""
        state = self._state(session_id)
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
                page = await self.history(session_id, after=position, limit=MAX_PAGE_SIZE)
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

    # -- WorkHub ------------------------------------------------------------------------
    async def start_worker(
        self,
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
        coordinator = self._state(coordinator_id)
        self._check_open()
        body = {
            "coordinatorId": coordinator_id,
            "origin": to_wire(origin),
            "task": task,
            "tools": None if tools is None else list(tools),
        }
        digest = operation_digest("startWorker", body)
        original = await self._find(coordinator, operation, digest)
        if original is not None:
            return from_wire(WorkerReceipt, original)
        known = [w for w in coordinator.workers if w[2] != operation]
        if len(known) >= MAX_WORKERS:
            raise QueueFull(f"the coordinator already has {MAX_WORKERS} workers")
        # Sub-operations of this one, each idempotent on its own (ids stay within 128).
        step = f"worker.{operation}"[:118]
        allowed = await self._enabled_tools(coordinator)
        wanted = tuple(dict.fromkeys(tools)) if tools is not None else allowed
        if not set(wanted) <= set(allowed):
            wider = sorted(set(wanted) - set(allowed))
            raise ForkRefused(f"a worker cannot enable tools its coordinator has not: {wider}")
        if isinstance(origin, ForkWorker):
            forked = await self.fork(
                coordinator_id,
                revision=coordinator.revision,
                turn_id=origin.turn_id,
                tools=wanted,
                operation=step + ".fork",
            )
            worker_id: str = forked.session.id
        else:
            worker_id = await self._create_worker(coordinator, origin.agent, wanted, step + ".new")
        sent = await self.send(worker_id, task, operation=step + ".task")
        sequence = coordinator.revision + 1
        receipt = WorkerReceipt(
            worker_id=worker_id,  # type: ignore[arg-type]
            invocation_id=sent.invocation_id,
            receipt=_receipt(operation, "startWorker", coordinator_id, sequence),
        )
        payload = {
            "workerId": worker_id,
            "invocationId": sent.invocation_id,
            "operation": operation,
        }
        async with coordinator.lock:
            replayed = await self._append(
                coordinator,
                [NewEvent(WORKER_STARTED, None, payload)],
                OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
            )
            if replayed is not None:
                return from_wire(WorkerReceipt, json.loads(replayed))
            coordinator.workers.append((worker_id, sent.invocation_id, operation))
        return receipt

    async def workers(self, coordinator_id: str) -> WorkHubSnapshot:
        """Every worker of the coordinator in start order, with its first task's state
        and, once completed, its answer."""
        coordinator = self._state(coordinator_id)
        statuses = []
        for worker_id, invocation_id, _ in coordinator.workers:
            worker = self._state(worker_id)
            if invocation_id in worker.queue:
                running = worker.queue.running
                state = (
                    "running"
                    if running is not None and running.work.invocation_id == invocation_id
                    else "queued"
                )
                result = None
            else:
                done = await self.execute_result(worker_id, invocation_id)
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

    async def _create_worker(
        self, coordinator: _SessionState, agent: str, tools: tuple[str, ...], operation: str
    ) -> str:
        """A new session of ``agent`` on the coordinator's workspace, narrowed to
        ``tools``; its id follows from the coordinator and the operation."""
        if agent not in self._agents:
            raise UnknownAgent(f"the Host knows no agent named {agent!r}")
        worker_id = _fork_id(coordinator.session_id, operation)
        if worker_id in self._sessions:
            return worker_id
        config = {
            "host": True,
            "agent": agent,
            "workspace": coordinator.workspace,
            "title": None,
            "tools": list(tools),
            "coordinator": coordinator.session_id,
        }
        state = self._new_state(worker_id, config, created_at=time.time())
        # Narrow now, so a tool the agent lacks fails here and not in its first turn.
        app = await self._app_session(state, stored=False)
        try:
            missing = sorted(set(tools) - set(app.agent_session.available_tools))
            if missing:
                raise ForkRefused(f"agent {agent!r} has no tools {missing}")
            # The worker never holds a tool its coordinator has not enabled.
            app.agent_session.set_enabled_tools(
                [t for t in app.agent_session.available_tools if t in set(tools)]
            )
            with contextlib.suppress(SessionExists):  # a retry after a lost answer
                await self._store.create_session(
                    worker_id, "{}", config, events=[NewEvent(SESSION_CREATED, None, config)]
                )
        except BaseException:
            with trio.CancelScope(shield=True):
                await app.aclose()
            raise
        state.revision = max(state.revision, 1)
        self._sessions[worker_id] = state
        self._start_runner(state)
        return worker_id

    # -- diagnostics --------------------------------------------------------------------
    async def diagnostics(
        self,
        session_id: str,
        *,
        through: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> DiagnosticsPage:
        """The session's failures, newest first, under a diagnostic-revision fence
        (independent of history revisions); follow ``next_before`` with the same fence."""
        state = self._state(session_id)
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise ServiceError(f"limit must be between 1 and {MAX_PAGE_SIZE}")
        await trio.lowlevel.checkpoint()
        return state.diagnostics.page(session_id, through=through, before=before, limit=limit)

    @asynccontextmanager
    async def watch_diagnostics(
        self, session_id: str
    ) -> AsyncIterator[AsyncIterator[DiagnosticsRevision]]:
        """The current diagnostic revision at once, then the newest after each change
        (changes in between coalesce); read the latest page again on each one."""
        state = self._state(session_id)

        async def revisions() -> AsyncGenerator[DiagnosticsRevision, None]:
            seen = -1
            while not self._closed:
                changed = state.diagnostics_changed
                if state.diagnostics.revision != seen:
                    seen = state.diagnostics.revision
                    yield DiagnosticsRevision(session_id=session_id, revision=seen)  # type: ignore[arg-type]
                    continue
                await changed.wait()

        stream = revisions()
        try:
            yield stream
        finally:
            await stream.aclose()

    # -- forks --------------------------------------------------------------------------
    async def fork(
        self,
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
        source = self._state(session_id)
        self._check_open()
        wanted = None if tools is None else tuple(dict.fromkeys(tools))
        body = {
            "sessionId": session_id,
            "turnId": turn_id,
            "revision": revision,
            "tools": None if wanted is None else list(wanted),
            "title": title,
        }
        digest = operation_digest("fork", body)
        fork_id = _fork_id(session_id, operation)
        if fork_id in self._sessions:
            original = await self._find(self._sessions[fork_id], operation, digest)
            if original is not None:
                return from_wire(ForkReceipt, original)
        if not 0 <= revision <= source.revision:
            raise ForkRefused(
                f"revision {revision} is not a revision of session {session_id}"
                f" (its newest is {source.revision})"
            )
        rows, through_turn = await self._fork_rows(source, revision, turn_id)
        enabled = await self._enabled_tools(source)
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
            "title": title,
            "branch": branch,
            "tools": list(wanted if wanted is not None else enabled),
        }
        events = [NewEvent(SESSION_CREATED, None, dict(config, copied=len(rows)))]
        for turn, messages in rows:
            for event in turn_events(turn, messages):
                events.append(attrs.evolve(event, payload=dict(event.payload, copied=True)))
        sequence = len(events)
        state = self._new_state(fork_id, config, created_at=time.time())
        state.revision = sequence
        receipt = ForkReceipt(
            session=self._info(state),
            branch=from_wire(Branch, branch),
            receipt=_receipt(operation, "fork", fork_id, sequence),
        )
        try:
            await self._store_new_session(fork_id, config, events, operation, digest, receipt)
        except SessionExists:
            original = await self._find(self._sessions[fork_id], operation, digest)
            if original is None:
                raise OperationConflict(f"operation {operation!r} named another fork") from None
            return from_wire(ForkReceipt, original)
        newest = await self._store.last_position(fork_id)
        state.last_row = None if newest is None else wire_position(newest)
        self._sessions[fork_id] = state
        self._start_runner(state)
        return receipt

    async def fork_receipt(self, session_id: str, *, operation: str) -> ForkReceipt | None:
        """The fork published under ``operation`` from ``session_id``, or None. None
        proves nothing (the fork may not have been published yet) and authorizes no
        replacement: retry the original request with its reference."""
        self._state(session_id)
        fork_id = _fork_id(session_id, operation)
        if fork_id not in self._sessions:
            return None
        stored = await self._store.operation_receipt(fork_id, operation)
        return None if stored is None else from_wire(ForkReceipt, json.loads(stored))

    async def _fork_rows(
        self, source: _SessionState, revision: int, turn_id: str | None
    ) -> tuple[list[tuple[str, list[Message]]], str | None]:
        """The source's settled turns (id, messages) up to ``revision``, through
        ``turn_id`` when given."""
        settled: list[str] = []
        after = 0
        while after < revision:
            events = await self._store.events_after(source.session_id, after, limit=1000)
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
            page = await self.history(
                source.session_id, through=revision, after=position, limit=MAX_PAGE_SIZE
            )
            for row in page.rows:
                if row.turn_id in keep:
                    stored = await self._store.read_row(
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

    async def _enabled_tools(self, state: _SessionState) -> tuple[str, ...]:
        if state.tools is not None:
            return state.tools
        app = await self._app_session(state)
        return app.agent_session.enabled_tools

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
        fence, rows, more = await self._store.history_page_as(
            session_id,
            page_row,
            through=through,
            after=None if after is None else store_position(after),
            limit=limit,
        )
        # Built from the store's checked rows: no construction checks (see _rows).
        return trusted(
            HistoryPage,
            session_id=session_id,
            through=fence,
            rows=tuple(rows),
            next_after=rows[-1].position if more else None,
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
        # The store narrows the rows to those that may hold the query (a block scan);
        # the matcher decides, with the exact semantics, on a worker thread.
        page = await self._store.search_candidates(
            session_id,
            query,
            case_sensitive=case_sensitive,
            through=through,
            after=None if after is None else store_position(after),
        )
        hits: list[SearchHit] = []
        cut = None
        if page.rows:
            hits, cut = await trio.to_thread.run_sync(
                functools.partial(
                    match_rows,
                    page.rows,
                    query,
                    case_sensitive=case_sensitive,
                    whole_word=whole_word,
                )
            )
        if cut is None and page.next_after is not None:
            cut = wire_position(page.next_after)
        return trusted(SearchPage, through=page.through, hits=tuple(hits), next_after=cut)

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

    @property
    def closed(self) -> bool:
        """Whether the Host has begun closing (it then takes no new work)."""
        return self._closed

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
            state.diagnostics_changed.set()

    async def _store_new_session(
        self,
        session_id: str,
        config: dict[str, Any],
        events: Sequence[NewEvent],
        operation: str,
        digest: str,
        receipt: Any,
    ) -> None:
        """Create a session with its first events and the receipt of the operation that
        made it, in one transaction (raises ``SessionExists`` when it is there)."""
        await self._store.create_session(
            session_id,
            "{}",
            config,
            events=events,
            operation=OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
        )

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
        tools = config.get("tools")
        return _SessionState(
            session_id=session_id,
            agent_name=str(config["agent"]),
            workspace=str(config["workspace"]),
            title=config.get("title"),
            created_at=created_at,
            queue=WorkQueue(self._queue_capacity),
            branch=config.get("branch"),
            tools=None if tools is None else tuple(str(t) for t in tools),
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
                    history_row(
                        position=trusted(Position, source_sequence=sequence, item_index=index),
                        turn_id=event.turn_id or "",
                        role=message.role,
                        body=message.text,
                        thinking=message.reasoning,
                        calls=message.tool_calls,
                        tool_call_id=message.tool_call_id,
                        tool_name=names.get(message.tool_call_id)
                        if message.tool_call_id is not None
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
        # Built from the Host's own checked queue: no construction checks (a snapshot
        # goes to every watcher after every change, and the queue may be long).
        return trusted(
            QueueSnapshot,
            session_id=state.session_id,
            revision=state.queue.revision,
            entries=tuple(
                trusted(
                    QueueEntry,
                    invocation_id=e.work.invocation_id,
                    operation=e.work.operation,
                    work=e.work.kind,
                    state=e.state,
                    admitted_sequence=e.work.admitted_sequence,
                )
                for e in state.queue.entries
            ),
        )

    def _publish_queue(self, state: _SessionState) -> None:
        if not state.subscribers:
            return
        update = trusted(QueueChanged, kind="queue", queue=self._queue_snapshot(state))
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
                # While this waited for the lock the Host may have begun closing, or a
                # stop may have taken the work out of the queue.
                if self.closed:
                    return
                if state.queue.next_to_run() != work:
                    continue
                # Set before the append awaits, so a close that begins meanwhile cancels
                # this turn (it then settles at once, as interrupted).
                cancellation = state.cancellation = AgentCancellation()
                await self._append(
                    state,
                    [NewEvent(QUEUE_STARTED, None, {"invocationId": work.invocation_id})],
                )
                state.queue.start(work.invocation_id)
            self._publish_queue(state)
            await self._run_turn(state, work, cancellation)

    async def _app_session(self, state: _SessionState, *, stored: bool = True) -> AppSession:
        """The running engine session of ``state`` (started on first use from its
        stored history; ``stored=False`` starts a session not yet in the store)."""
        if state.app is None:
            defined = self._agents[state.agent_name]
            recording = RecordingModel(
                defined.client.model,
                functools.partial(self._request_prepared, state),
                functools.partial(self._request_settled, state),
            )
            agent = attrs.evolve(
                defined,
                client=Client(recording),
                approver=_HostApprovals(self, state),
                workspace=pathlib.Path(state.workspace),
            )
            history = (await self._store.load_session(state.session_id)).messages if stored else ()
            state.app = (
                await self._engine.create(agent)
                .session_id(state.session_id)
                .history(history)
                .tool_journal(functools.partial(self._journal, state))
                .start()
            )
            if state.tools is not None:
                state.app.agent_session.set_enabled_tools(state.tools)
        return state.app

    async def _run_turn(
        self, state: _SessionState, work: Work, cancellation: AgentCancellation
    ) -> None:
        turn_id = new_id()
        outcome = "completed"
        error: dict[str, Any] | None = None
        failure: BaseException | None = None
        try:
            app = await self._app_session(state)
            turn = await app.send_and_wait(work.text, cancellation=cancellation)
            events = turn_events(turn.turn_id, turn.messages)
            turn_id = turn.turn_id
        except AgentError as exc:
            if cancellation.cancelled:
                outcome = "interrupted" if self._closed else "stopped"
            else:
                outcome = "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            failure = exc
            if exc.rolled_back is False:
                events = turn_events(turn_id, exc.checkpoint, outcome="checkpointed")
            else:
                events = turn_events(turn_id, (), outcome="rolled_back")
        except EmelexError as exc:
            # The session could not start (an integration failed, the agent is invalid):
            # nothing ran, so nothing is committed.
            outcome = "failed"
            error = {"type": type(exc).__name__, "message": str(exc)[:4096]}
            failure = exc
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
                batch = [*events, *settled, NewEvent(QUEUE_FINISHED, turn_id, finished)]
                recorded = None
                if outcome == "failed" and failure is not None:
                    kind, code, message = classify(failure)
                    recorded = self._diagnostic(
                        state, kind, code, message, work.invocation_id, turn_id, len(batch)
                    )
                    batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
                await self._append(state, batch)
                if recorded is not None:
                    self._add_diagnostic(state, recorded)
                state.queue.remove(work.invocation_id)
                state.finished.add(work.invocation_id)
                state.outcomes[work.invocation_id] = outcome
                state.cancellation = None
        self._publish_queue(state)
        self._publish_interactions(state)
        if self._titles and outcome == "completed" and state.title is None:
            await self._make_title(state, work.text, turn_id)

    async def _make_title(self, state: _SessionState, text: str, turn_id: str) -> None:
        """Ask the agent's model for a short title; record it, or a title diagnostic."""
        client = self._agents[state.agent_name].client
        request = GenerationRequest(
            [
                Message.system(
                    "Reply with a title of at most eight words for a conversation that"
                    " starts with the user's message. Reply with the title only."
                ),
                Message.user(text[:2000]),
            ],
            options=GenerationOptions(max_tokens=24),
        )
        title = ""
        failure: str | None = None
        with trio.move_on_after(TITLE_SECONDS) as scope:
            try:
                async with client.generate(request) as stream:
                    async for event in stream:
                        if isinstance(event, Completed):
                            title = " ".join(event.response.text.split())
            except Exception as exc:  # any model's failure; a title never fails a turn
                failure = f"the title call failed ({type(exc).__name__})"
        if scope.cancelled_caught:
            failure = f"the title call took longer than {TITLE_SECONDS:g} s"
        title = clip(title.strip(" \"'"), 80)
        if failure is None and not title:
            failure = "the model answered the title call with no text"
        async with state.lock:
            if failure is not None:
                recorded = self._diagnostic(state, "title", "modelError", failure, None, turn_id, 1)
                await self._append(
                    state, [NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded))]
                )
                self._add_diagnostic(state, recorded)
            else:
                await self._append(state, [NewEvent(SESSION_TITLED, None, {"title": title})])
                state.title = title

    async def _request_prepared(self, state: _SessionState, request: GenerationRequest) -> int:
        """Record a main request before the model starts; returns its event sequence."""
        running = state.queue.running
        turn = current_turn()
        payload = {
            "invocationId": running.work.invocation_id if running is not None else "",
            "turnId": turn[1] if turn is not None else "",
            **summarize(request),
        }
        async with state.lock:
            await self._append(state, [NewEvent(REQUEST_PREPARED, payload["turnId"], payload)])
            sequence = state.revision
        state.requests.append(_Request(sequence, payload))
        del state.requests[:-MAX_REQUESTS_KEPT]
        return sequence

    async def _request_settled(
        self, state: _SessionState, sequence: int, outcome: str, tokens: int | None
    ) -> None:
        payload = {"preparedSequence": sequence, "state": outcome, "providerInputTokens": tokens}
        async with state.lock:
            await self._append(state, [NewEvent(REQUEST_SETTLED, None, payload)])
            settled_at = state.revision
        for request in state.requests:
            if request.sequence == sequence:
                request.settle(settled_at, outcome, tokens)

    async def context(self, session_id: str, *, through: int | None = None) -> ContextReport:
        """The latest main request the session prepared as of the fence ``through``
        (None: now), also while it runs or after it was interrupted; None when the
        session prepared none of its own (copied history of a fork does not count)."""
        state = self._state(session_id)
        await trio.lowlevel.checkpoint()
        fence = state.revision if through is None else min(through, state.revision)
        chosen = None
        for request in reversed(state.requests):
            if request.sequence <= fence:
                chosen = request
                break
        report = None
        if chosen is not None:
            settled = chosen.settled_at is not None and chosen.settled_at <= fence
            if settled:
                outcome = chosen.state
            elif chosen.settled_at is not None or state.queue.running is not None:
                outcome = "running"  # as of the fence (it ended later, or runs now)
            else:
                outcome = "interrupted"  # it never ended: the Host stopped meanwhile
            report = prepared_request(
                chosen.payload,
                invocation_id=chosen.payload["invocationId"],
                turn_id=chosen.payload["turnId"],
                state=outcome,
                prepared_sequence=chosen.sequence,
                provider_input_tokens=chosen.tokens if settled else None,
            )
        return ContextReport(session_id=session_id, through=fence, request=report)  # type: ignore[arg-type]

    def _diagnostic(
        self,
        state: _SessionState,
        kind: str,
        code: str,
        message: str,
        invocation_id: str | None,
        turn_id: str | None,
        offset: int,
    ) -> Diagnostic:
        """A diagnostic for the event ``offset`` events after the session's newest."""
        return diagnostic(
            revision=state.diagnostics.revision + 1,
            diagnostic_id=new_id(),
            kind=kind,
            code=code,
            message=message,
            invocation_id=invocation_id,
            turn_id=turn_id,
            event_sequence=state.revision + offset,
            recorded_at_ms=int(time.time() * 1000),
        )

    def _add_diagnostic(self, state: _SessionState, recorded: Diagnostic) -> None:
        state.diagnostics.add(recorded)
        changed, state.diagnostics_changed = state.diagnostics_changed, trio.Event()
        changed.set()

    async def _journal(
        self, state: _SessionState, turn_id: str, checkpoint: tuple[Message, ...]
    ) -> None:
        """Write down, before a tool may run, what the turn commits if the Host is lost:
        recovery then checkpoints the turn instead of rolling it back."""
        running = state.queue.running
        if running is None:
            raise ServiceError("a tool is starting outside of any invocation")
        payload = {
            "invocationId": running.work.invocation_id,
            "messages": [json.loads(to_json_message(m)) for m in checkpoint],
        }
        async with state.lock:
            await self._append(state, [NewEvent(TURN_JOURNAL, turn_id, payload)])

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
            journals: dict[str, tuple[str, list[Any]]] = {}
            after = 0
            while True:
                events = await self._store.events_after(summary.id, after, limit=1000)
                if not events:
                    break
                for event in events:
                    self._replay(state, event.kind, event.payload, event.sequence, started)
                    if event.kind == TURN_JOURNAL and event.turn_id is not None:
                        journal = event.payload
                        journals[journal["invocationId"]] = (event.turn_id, journal["messages"])
                after = events[-1].sequence
            state.revision = after
            newest = await self._store.last_position(summary.id)
            state.last_row = None if newest is None else wire_position(newest)
            self._sessions[summary.id] = state
            interrupted = [i for i in started if i in state.queue]
            for invocation_id in interrupted:
                state.queue.remove(invocation_id)
                settled = self._settle_interactions(state, invocation_id, "restart")
                if invocation_id in journals:
                    # A tool may have run: keep the journalled checkpoint (harness rule).
                    turn_id, bodies = journals[invocation_id]
                    messages = [from_json(json.dumps(body), Message) for body in bodies]
                    turn = turn_events(turn_id, messages, outcome="checkpointed")
                else:
                    turn_id = new_id()
                    turn = turn_events(turn_id, (), outcome="rolled_back")
                batch = [
                    *turn,
                    *settled,
                    NewEvent(
                        QUEUE_FINISHED,
                        turn_id,
                        {"invocationId": invocation_id, "outcome": "interrupted"},
                    ),
                ]
                recorded = self._diagnostic(
                    state,
                    "execution",
                    "interrupted",
                    "the Host stopped while this invocation ran; its turn was settled"
                    " by the harness rules",
                    invocation_id,
                    turn_id,
                    len(batch),
                )
                batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
                await self._append(state, batch)
                self._add_diagnostic(state, recorded)
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
                Work(
                    payload["invocationId"],
                    payload["operation"],
                    payload["text"],
                    sequence,
                    kind=payload.get("work", "send"),
                )
            )
        elif kind == QUEUE_STARTED:
            started.add(payload["invocationId"])
        elif kind == QUEUE_FINISHED:
            invocation_id = payload["invocationId"]
            if invocation_id in state.queue:
                state.queue.remove(invocation_id)
            state.finished.add(invocation_id)
            state.outcomes[invocation_id] = str(payload.get("outcome", "failed"))
            started.discard(invocation_id)
        elif kind == INTERACTION_REQUESTED:
            interaction = from_wire(Interaction, payload)
            state.pending[interaction.id] = _Pending(interaction)
        elif kind == INTERACTION_RESOLVED:
            interaction = from_wire(Interaction, payload)
            state.pending.pop(interaction.id, None)
            state.resolved[interaction.id] = interaction
        elif kind == REQUEST_PREPARED:
            state.requests.append(_Request(sequence, payload))
            del state.requests[:-MAX_REQUESTS_KEPT]
        elif kind == REQUEST_SETTLED:
            for request in state.requests:
                if request.sequence == payload["preparedSequence"]:
                    request.settle(sequence, payload["state"], payload["providerInputTokens"])
        elif kind == WORKER_STARTED:
            state.workers.append(
                (payload["workerId"], payload["invocationId"], payload["operation"])
            )
        elif kind == DIAGNOSTIC_RECORDED:
            state.diagnostics.add(from_wire(Diagnostic, payload))
        elif kind == SESSION_TITLED:
            state.title = str(payload["title"])
