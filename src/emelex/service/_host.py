"""The Host: one process owning the store and the engine, driven through operations.

Every mutation is made durable before it is answered: the event that records it and the
receipt of its operation reference commit in one store transaction, so a retried request
returns the original receipt and is never applied twice. Each session has a work queue
and one runner task that takes its invocations in order and runs them as turns; a turn's
rows, the end of its invocation and the settlement of its interactions commit together.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
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
)
from emelex.app import Agent, Engine, Harness
from emelex.app import Session as AppSession
from emelex.contracts import (
    MAX_ATTACHMENT_BYTES,
    MAX_PAGE_SIZE,
    MAX_PATCH_PAGE_BYTES,
    MAX_QUERY_CHARS,
    MAX_TEXT_CHARS,
    AgentWorker,
    AttachmentMeta,
    ContextReport,
    CreateSessionReceipt,
    Diagnostic,
    DiagnosticsPage,
    DiagnosticsRevision,
    ExecuteReceipt,
    ExecuteResult,
    FilesPage,
    ForkReceipt,
    ForkWorker,
    GitArea,
    GitDiff,
    GitStatus,
    HistoryPage,
    HistoryRow,
    Interaction,
    InteractionResponse,
    InteractionsChanged,
    OperationReceipt,
    PatchPage,
    PendingInteractions,
    Position,
    QueueChanged,
    QueueSnapshot,
    ReadFileUpdate,
    Resolution,
    RespondReceipt,
    RowsPublished,
    SearchPage,
    SendReceipt,
    SessionInfo,
    SnapshotPatchReceipt,
    StopReceipt,
    WatchFilesUpdate,
    WatchUpdate,
    WorkerReceipt,
    WorkHubSnapshot,
    WorkspacePath,
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
from emelex.service import _executor, _forks, _interactions, _workhub
from emelex.service._cluster import Cluster, ScaleOut
from emelex.service._context import prepared_request
from emelex.service._diagnostics import (
    DIAGNOSTIC_RECORDED,
    classify,
    diagnostic,
)
from emelex.service._digest import operation_digest
from emelex.service._errors import (
    OperationConflict,
    QueueFull,
    ServiceError,
    UnknownAgent,
    UnknownInvocation,
)
from emelex.service._events import (
    INTERACTION_RESOLVED,
    QUEUE_ADMITTED,
    QUEUE_FINISHED,
    QUEUE_STARTED,
    QUEUE_STOP,
    SESSION_CREATED,
    SESSION_TITLED,
)
from emelex.service._files import NAMES as FILE_NAMES
from emelex.service._files_access import FileAuthority
from emelex.service._files_host import session_authority
from emelex.service._files_pages import PageCache, list_files
from emelex.service._queue import Work
from emelex.service._read_file import read_stream
from emelex.service._registry import Services, SessionRegistry, find_receipt
from emelex.service._rows import page_row, store_position, wire_position, wire_row
from emelex.service._searching import search_page
from emelex.service._session import HostSession
from emelex.service._state import (
    SESSION_NAMESPACE,
    operation_receipt,
    resolved_interaction,
    rows_after,
)
from emelex.service._store import open_host_store
from emelex.service._turn_hooks import TurnHooks
from emelex.service._watch import DEFAULT_WATCH_BUFFER, Subscriber, WatchStream
from emelex.service._watch_files import watch_stream
from emelex.store import (
    AppendResult,
    NewEvent,
    OperationRecord,
    SessionExists,
    SqliteStore,
    Store,
    StoreError,
    turn_events,
)
from emelex.store import OperationConflict as StoreOperationConflict

#: Unfinished invocations one session's queue holds.
DEFAULT_QUEUE_CAPACITY: Final = 64
#: How long the automatic title call of a session may take.
TITLE_SECONDS: Final = 60.0


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
        store: Store,
        engine: Engine,
        agents: Mapping[str, Agent],
        nursery: trio.Nursery,
        *,
        queue_capacity: int,
        watch_buffer: int,
        titles: bool = False,
        max_attachment_bytes: int = MAX_ATTACHMENT_BYTES,
        harnesses: Mapping[str, Harness] | None = None,
    ) -> None:
        self.root = root
        self._harnesses = dict(harnesses or {})
        self._titles = titles
        self._max_attachment_bytes = max_attachment_bytes
        self._store = store
        self._engine = engine
        self._agents = dict(agents)
        self._nursery = nursery
        self._queue_capacity = queue_capacity
        self._watch_buffer = watch_buffer
        self._closed = False
        self._registry = SessionRegistry(
            capacity=queue_capacity,
            appender=self._appender,
            start_runner=self._start_runner,
            is_closed=lambda: self._closed,
        )
        #: Set when the store is shared with other Hosts (PostgreSQL): see _cluster.py.
        self._cluster: Cluster | None = None

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
        harnesses: Mapping[str, Harness] | None = None,
        store: str | None = None,
        scale_out: ScaleOut | None = None,
    ) -> AsyncIterator[Host]:
        """Open the Host whose state lives under ``root`` (created 0700), recover every
        stored session, and run until the block exits (running turns are then cancelled
        and settled by the harness rules). With ``titles``, a session without a title
        gets one from a short call of its agent's model after its first completed turn
        (at most ``TITLE_SECONDS``); a failure there is a diagnostic, never a turn
        failure. ``harnesses`` gives an agent its harness (built-in file and shell
        tools, workspace policy), as an agent package's ``harness()`` does for
        ``emelex run``; an agent without one runs with its own tools only.
        ``store`` is a PostgreSQL connection string (see
        docs/service/scale-out.md); None keeps the SQLite file ``root/host.db``. On
        PostgreSQL, Hosts sharing the database share its sessions; ``scale_out`` tunes
        leases and catch-up."""
        path = pathlib.Path(root)
        if scale_out is not None and store is None:
            raise ServiceError("scale_out needs a PostgreSQL store")
        await trio.Path(path).mkdir(mode=0o700, parents=True, exist_ok=True)
        for name in harnesses or {}:
            if name not in agents:
                raise TypeError(f"a harness is given for {name!r}, which is no agent")
        for name in agents:
            if not isinstance(agents[name], Agent):
                raise TypeError(f"agent {name!r} is not an emelex Agent")
        async with open_host_store(path, store) as opened:
            own_engine = engine is None
            active = Engine() if engine is None else engine
            try:
                async with trio.open_nursery() as nursery:
                    host = cls(
                        path,
                        opened,
                        active,
                        agents,
                        nursery,
                        queue_capacity=queue_capacity,
                        watch_buffer=watch_buffer,
                        titles=titles,
                        max_attachment_bytes=max_attachment_bytes,
                        harnesses=harnesses,
                    )
                    await host._join_cluster(scale_out)
                    await host._recover()
                    try:
                        yield host
                    finally:
                        host.begin_close()
            finally:
                with trio.CancelScope(shield=True):
                    if host._cluster is not None:
                        await host._cluster.release_all()
                    for state in host._registry:
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
        self._registry.check_open()
        directory = str(await trio.Path(workspace).resolve())
        body = {"agent": agent, "workspace": directory, "title": title}
        digest = operation_digest("createSession", body)
        session_id = "s-" + uuid.uuid5(SESSION_NAMESPACE, operation).hex
        if session_id not in self._registry:
            if agent not in self._agents:
                raise UnknownAgent(f"the Host knows no agent named {agent!r}")
            if not await trio.Path(directory).is_dir():
                raise ServiceError(f"workspace {directory} is not a directory")
        receipt = operation_receipt(operation, "createSession", session_id, 1)
        config = {"host": True, **body}
        try:
            await self._services.create(
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
            created = [NewEvent(SESSION_CREATED, None, dict(body))]
            self._registry.adopt(
                self._registry.new(session_id, config, created_at=time.time(), events=created)
            )
        return CreateSessionReceipt(session=self._registry.get(session_id).info(), receipt=receipt)

    def sessions(self) -> tuple[SessionInfo, ...]:
        return tuple(state.info() for state in self._registry)

    # -- send and stop ----------------------------------------------------------------------
    async def send(self, session_id: str, text: str, *, operation: str) -> SendReceipt:
        """Admit ``text`` to the session's queue. Raises :class:`QueueFull` (nothing is
        admitted) when the queue is full."""
        state = self._registry.get(session_id)
        if not text or len(text) > MAX_TEXT_CHARS:
            raise ServiceError(f"send text must hold 1 to {MAX_TEXT_CHARS} characters")
        digest = operation_digest("send", {"sessionId": session_id, "text": text})
        async with state.lock:
            try:
                state.queue.check_room()
            except QueueFull:
                # A retry of an admitted send still gets its receipt from a full queue.
                original = await find_receipt(self._store, session_id, operation, digest)
                if original is not None:
                    return from_wire(SendReceipt, original)
                raise
            self._registry.check_open()
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

    async def stop(self, session_id: str, invocation_id: str, *, operation: str) -> StopReceipt:
        """Stop one invocation: a queued one leaves the queue; a running one is cancelled
        and settled by the harness rules (``stopping``); a finished one is left alone."""
        state = self._registry.get(session_id)
        digest = operation_digest("stop", {"sessionId": session_id, "invocationId": invocation_id})
        async with state.lock:
            original = await find_receipt(self._store, session_id, operation, digest)
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
                events.append(
                    NewEvent(
                        QUEUE_FINISHED,
                        None,
                        {"invocationId": invocation_id, "outcome": "stopped"},
                    )
                )
            else:
                events.append(NewEvent(QUEUE_STOP, None, {"invocationId": invocation_id}))
            # The reducer records the outcome; a running turn is cancelled by its runner's
            # session when the stop is applied (here, or on the Host that runs it).
            await state.commit(
                events, OperationRecord(operation, digest, json.dumps(to_wire(receipt)))
            )
        return receipt

    def queue(self, session_id: str) -> QueueSnapshot:
        return self._registry.get(session_id).queue_snapshot()

    # -- interactions -------------------------------------------------------------------
    async def pending_interactions(self, session_id: str) -> PendingInteractions:
        return await _interactions.pending_interactions(self._services, session_id)

    async def interaction(self, session_id: str, interaction_id: str) -> Interaction:
        return await _interactions.interaction(self._services, session_id, interaction_id)

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
        return await _interactions.respond(
            self._services, session_id, interaction_id, response, operation=operation
        )

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
        return await _executor.execute(
            self._services,
            agent,
            text,
            operation=operation,
            attachments=attachments,
            resource=resource,
        )

    async def execute_result(self, session_id: str, invocation_id: str) -> ExecuteResult | None:
        """How an Executor task ended, or None while it is queued or running."""
        return await _executor.execute_result(self._services, session_id, invocation_id)

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
        return await _workhub.start_worker(
            self._services, coordinator_id, origin, task, operation=operation, tools=tools
        )

    async def workers(self, coordinator_id: str) -> WorkHubSnapshot:
        """Every worker of the coordinator in start order, with its first task's state
        and, once completed, its answer."""
        return await _workhub.workers(self._services, coordinator_id)

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
        state = self._registry.get(session_id)
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
        state = self._registry.get(session_id)

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
        return await _forks.fork(
            self._services,
            session_id,
            revision=revision,
            operation=operation,
            turn_id=turn_id,
            tools=tools,
            title=title,
        )

    async def fork_receipt(self, session_id: str, *, operation: str) -> ForkReceipt | None:
        """The fork published under ``operation`` from ``session_id``, or None. None
        proves nothing (the fork may not have been published yet) and authorizes no
        replacement: retry the original request with its reference."""
        return await _forks.fork_receipt(self._services, session_id, operation=operation)

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
        self._registry.get(session_id)
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
        self._registry.get(session_id)
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
        self._registry.get(session_id)
        if not query or len(query) > MAX_QUERY_CHARS:
            raise ServiceError(f"a search query holds 1 to {MAX_QUERY_CHARS} characters")
        # The store narrows the rows to those that may hold the query (a block scan);
        # the matcher decides, with the exact semantics, on the same reader thread.
        decide = functools.partial(
            search_page, query=query, case_sensitive=case_sensitive, whole_word=whole_word
        )
        return await self._store.search_candidates_as(
            session_id,
            query,
            decide,
            case_sensitive=case_sensitive,
            through=through,
            after=None if after is None else store_position(after),
            # Without whole words the scan may match common rows itself.
            spans=not whole_word,
        )

    @asynccontextmanager
    async def watch(
        self, session_id: str, *, after: Position | None = None, live: bool = False
    ) -> AsyncIterator[AsyncIterator[WatchUpdate]]:
        """Subscribe to new rows after ``after`` (a page's ``next_after``), queue changes
        and pending-interaction changes. The stream first catches up from the store, then
        follows live commits; a watcher that falls ``watch_buffer`` updates behind ends
        with ``WatchEnded(reason="lagged", resume_after=...)``: watch again from there.
        ``live=True`` adds the running answer's drafts (``DraftUpdated``/``DraftCleared``,
        never stored; see docs/service/watch.md)."""
        state = self._registry.get(session_id)
        subscriber = Subscriber(after, self._watch_buffer, live=live)
        state.subscribers.add(subscriber)
        if live:
            self._attach_drafts(state, subscriber)
        stream = WatchStream(self._watch_stream(state, subscriber), subscriber)
        try:
            yield stream
        finally:
            state.subscribers.discard(subscriber)
            await stream.aclose()

    async def _watch_stream(
        self, state: HostSession, subscriber: Subscriber
    ) -> AsyncGenerator[WatchUpdate, None]:
        yield QueueChanged(queue=state.queue_snapshot())
        yield InteractionsChanged(pending=tuple(state.pending.values()))
        while not subscriber.ended and rows_after(subscriber.delivered, state.last_row):
            page = await self.history(state.session_id, after=subscriber.delivered)
            caught_up = RowsPublished(through=page.through, rows=page.rows, next_after=None)
            fresh = subscriber.fresh_rows(caught_up) if page.rows else None
            if fresh is not None:
                yield fresh
            if page.next_after is None:
                break
        # Live updates follow from the subscriber itself (see WatchStream).

    @property
    def closed(self) -> bool:
        """Whether the Host has begun closing (it then takes no new work)."""
        return self._closed

    # -- internals --------------------------------------------------------------------------
    def begin_close(self) -> None:
        """Stop taking work; cancel running turns through their AgentCancellation so the
        harness settles them (checkpoint or rollback) and the Host records that before
        its runners return."""
        self._closed = True
        if self._cluster is not None:
            self._cluster.close()
        for state in self._registry:
            for subscriber in state.subscribers:
                subscriber.end("closed")
            if state.cancellation is not None:
                state.cancellation.cancel()
            state.wake.set()
            state.diagnostics_changed.set()

    async def _appender(
        self,
        state: HostSession,
        events: Sequence[NewEvent],
        operation: OperationRecord | None,
    ) -> AppendResult:
        """Every session's way into the store (see HostSession.commit)."""
        try:
            if self._cluster is not None:
                return await self._cluster.append(state, events, operation)
            return await self._store.append_events(state.session_id, events, operation=operation)
        except StoreOperationConflict as exc:
            raise OperationConflict(
                f"operation {exc.reference!r} was already used for a different request"
            ) from exc

    @functools.cached_property
    def _services(self) -> Services:
        """What the operation modules get of this Host."""
        return Services(
            registry=self._registry,
            store=self._store,
            agents=self._agents,
            root=self.root,
            max_attachment_bytes=self._max_attachment_bytes,
            operations=self,
            app_session=lambda session, stored: self._app_session(session, stored=stored),
            private_dirs=self._private_dirs(),
        )

    # -- running work -------------------------------------------------------------------
    def _start_runner(self, state: HostSession) -> None:
        self._nursery.start_soon(self._run_session, state, name=f"host-session-{state.session_id}")

    async def _run_session(self, state: HostSession) -> None:
        """The session's runner, on one Host or many: claim the session (with other
        Hosts: its lease), settle what a lost Host left started, start the oldest
        queued work, run it, repeat; sleep while there is nothing to do."""
        cluster = self._cluster
        if cluster is not None:
            cluster.enter_runner(state)
        while not self._closed:
            if state.queue.next_to_run() is None and (
                cluster is None or state.queue.running is None
            ):
                state.wake = trio.Event()
                await state.wake.wait()
                continue
            try:
                if cluster is not None and not await cluster.claim(state):
                    continue
                async with state.lock:
                    # While this waited for the lock the Host may have begun closing,
                    # or a stop may have taken the work out of the queue.
                    if self.closed:
                        return
                    await self._settle_interrupted(state)
                    work = state.queue.next_to_run()
                    if work is None:
                        continue
                    # Set before the append awaits, so a close that begins meanwhile
                    # cancels this turn (it then settles at once, as interrupted).
                    cancellation = state.cancellation = AgentCancellation()
                    await state.commit(
                        [NewEvent(QUEUE_STARTED, None, {"invocationId": work.invocation_id})]
                    )
                    if state.log.running != work.invocation_id:
                        state.cancellation = None
                        continue  # (only a log other Hosts wrote to can say otherwise)
                await self._run_turn(state, work, cancellation)
            except StoreError as exc:
                if cluster is None:
                    raise
                cluster.abandon(state, exc)  # LeaseLost, or a database lost mid-commit

    async def _app_session(self, state: HostSession, *, stored: bool = True) -> AppSession:
        """The running engine session of ``state`` (started on first use from its
        stored history; ``stored=False`` starts a session not yet in the store)."""
        if state.app is None:
            defined = self._agents[state.agent_name]
            hooks = TurnHooks(state, self._nursery.start_soon)
            agent = attrs.evolve(
                defined,
                client=Client(hooks.model(defined.client.model)),
                approver=hooks,
                workspace=pathlib.Path(state.workspace),
            )
            history = (await self._store.load_session(state.session_id)).messages if stored else ()
            starter = self._engine.create(agent)
            harness = self._harnesses.get(state.agent_name)
            if harness is not None:
                starter = starter.harness(harness)
            state.app = (
                await starter.session_id(state.session_id)
                .history(history)
                .tool_journal(hooks.journal)
                .start()
            )
            if state.tools is not None:
                state.app.agent_session.set_enabled_tools(state.tools)
        return state.app

    async def _run_turn(
        self, state: HostSession, work: Work, cancellation: AgentCancellation
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
                if outcome == "failed" and failure is not None:
                    kind, code, message = classify(failure)
                    recorded = self._diagnostic(
                        state, kind, code, message, work.invocation_id, turn_id, len(batch)
                    )
                    batch.append(NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded)))
                state.cancellation = None
                await state.commit(batch)
        if self._titles and outcome == "completed" and state.title is None:
            await self._make_title(state, work.text, turn_id)

    async def _make_title(self, state: HostSession, text: str, turn_id: str) -> None:
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
                await state.commit([NewEvent(DIAGNOSTIC_RECORDED, turn_id, to_wire(recorded))])
            else:
                await state.commit([NewEvent(SESSION_TITLED, None, {"title": title})])

    async def context(self, session_id: str, *, through: int | None = None) -> ContextReport:
        """The latest main request the session prepared as of the fence ``through``
        (None: now), also while it runs or after it was interrupted; None when the
        session prepared none of its own (copied history of a fork does not count)."""
        state = self._registry.get(session_id)
        await trio.lowlevel.checkpoint()
        # Records a running turn has not written yet count as of the sequences they get.
        requests, newest = state.requests_view()
        fence = newest if through is None else min(through, newest)
        chosen = None
        for request in reversed(requests):
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
        state: HostSession,
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
            event_sequence=state.next_sequence - 1 + offset,
            recorded_at_ms=int(time.time() * 1000),
        )

    @staticmethod
    def _settle_interactions(state: HostSession, invocation_id: str, by: str) -> list[NewEvent]:
        """The events that settle an ended invocation's unanswered interactions as
        interrupted (the question is never asked again)."""
        events = []
        for pending in state.pending.values():
            if pending.invocation_id != invocation_id:
                continue
            resolved = resolved_interaction(
                pending,
                Resolution(
                    outcome="interrupted",
                    by=by,  # type: ignore[arg-type]
                    reason=None,
                    sequence=state.next_sequence,
                ),
            )
            events.append(NewEvent(INTERACTION_RESOLVED, resolved.turn_id, to_wire(resolved)))
        return events

    # -- recovery -----------------------------------------------------------------------
    async def _recover(self) -> None:
        """Rebuild every stored session from its event log (the same reducer the live
        path uses) and, on a Host of its own, settle what a previous Host left started;
        with other Hosts, whoever takes a session's lease settles it. Queued work keeps
        its place."""
        for summary in await self._store.list_sessions():
            stored_config = await self._session_config(summary.id)
            if stored_config is None:
                continue
            state = self._registry.new(summary.id, stored_config, created_at=summary.created_at)
            while True:
                events = await self._store.events_after(summary.id, state.revision, limit=1000)
                if not events:
                    break
                state.absorb(events)
            newest = await self._store.last_position(summary.id)
            state.last_row = None if newest is None else wire_position(newest)
            if self._cluster is None:
                async with state.lock:
                    await self._settle_interrupted(state)
            self._registry.adopt(state)

    async def _settle_interrupted(self, state: HostSession) -> None:
        """End the invocations a lost Host had started (the caller holds the lock and,
        with other Hosts, the lease): a journalled turn keeps its checkpoint (a tool may
        have run), any other is rolled back."""
        for invocation_id in state.log.interrupted():
            journal = state.log.journals.get(invocation_id)
            if journal is not None:
                # A tool may have run: keep the journalled checkpoint (harness rule).
                turn_id = journal.turn_id
                messages = [from_json(json.dumps(body), Message) for body in journal.messages]
                turn = turn_events(turn_id, messages, outcome="checkpointed")
            else:
                turn_id = new_id()
                turn = turn_events(turn_id, (), outcome="rolled_back")
            batch = [
                *turn,
                *self._settle_interactions(state, invocation_id, "restart"),
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
            await state.commit(batch)

    async def _session_config(self, session_id: str) -> dict[str, Any] | None:
        stored = await self._store.load_config(session_id)
        if not stored.get("host") or stored.get("agent") not in self._agents:
            return None
        return stored

    # -- issue 14, part A: git status/diff and completed-work patches -------------------
    # The logic lives in service/_git.py and service/_patch.py (loaded on first use, so
    # opening a Host does not import dulwich).
    async def git_status(self, session_id: str) -> GitStatus | None:
        """Fresh status of the session's repository (None: its workspace holds none).
        The workspace must be the repository's root."""
        from emelex.service._git import git_status

        return await git_status(self._registry.get(session_id).workspace, self._private_dirs())

    async def git_diff(self, session_id: str, area: GitArea, path: bytes) -> GitDiff | None:
        """One path's diff: ``staged`` HEAD->index, ``worktree`` index->working file,
        ``untracked`` empty->working file (None: no repository)."""
        from emelex.service._git import git_diff

        return await git_diff(
            self._registry.get(session_id).workspace, area, path, self._private_dirs()
        )

    def _private_dirs(self) -> tuple[str, ...]:
        """The Host's own state, never part of a workspace's work (when it lies inside)."""
        return (os.path.realpath(self.root),)

    async def snapshot_patch(self, session_id: str, *, operation: str) -> SnapshotPatchReceipt:
        """Capture the session's completed work as an immutable patch once no turn that
        may write its workspace is running; a retry returns the original receipt."""
        from emelex.service._patch import snapshot_patch

        state = self._registry.get(session_id)
        self._registry.check_open()
        return await snapshot_patch(self._services, state, operation)

    async def read_patch(
        self,
        session_id: str,
        patch_id: str,
        *,
        offset: int = 0,
        limit: int = MAX_PATCH_PAGE_BYTES,
    ) -> PatchPage:
        """Original bytes of a captured patch from ``offset``; follow ``next_offset``."""
        from emelex.service._patch import read_patch

        self._registry.get(session_id)
        return await read_patch(self._services, session_id, patch_id, offset, limit)

    # -- workspace files (issue 14, part B): list_files, watch_files, read_file ------------
    # Thin delegations: the work lives in _files.py, _watch_files.py and _read_file.py.
    def _file_authority(self, session_id: str) -> FileAuthority:
        state = self._registry.get(session_id)
        agent = self._agents.get(state.agent_name)
        if agent is None:  # its hidden paths are unknown here: fail closed
            raise UnknownAgent(f"the Host knows no agent named {state.agent_name!r}")
        return session_authority(state.workspace, agent.workspace_policy.hidden, self.root)

    async def list_files(
        self,
        session_id: str,
        path: WorkspacePath | None = None,
        *,
        after: WorkspacePath | None = None,
    ) -> FilesPage:
        """One page (at most 128 entries) of the direct children of ``path`` (None: the
        workspace root) after ``after`` (a page's ``next_after``); see docs/service/files.md."""
        authority = self._file_authority(session_id)
        return await list_files(self._file_pages, FILE_NAMES, authority, session_id, path, after)

    @functools.cached_property
    def _file_pages(self) -> PageCache:
        return PageCache()  # pages read ahead for list_files, this Host's own

    @asynccontextmanager
    async def watch_files(
        self, session_id: str, path: WorkspacePath | None = None
    ) -> AsyncIterator[AsyncIterator[WatchFilesUpdate]]:
        """``ready`` after the initial scan, then coalesced ``changed`` notifications
        (reread from the beginning) until ``unavailable``, ``error`` or ``end``."""
        stream = watch_stream(self._file_authority(session_id), path, lambda: self._closed)
        try:
            yield stream
        finally:
            await stream.aclose()

    @asynccontextmanager
    async def read_file(
        self, session_id: str, path: WorkspacePath, *, expected_version: str | None = None
    ) -> AsyncIterator[AsyncIterator[ReadFileUpdate]]:
        """One regular file: ``begin``, chunks and ``end``, or one explicit result
        (absent, changed, binary, unsupported). Check it with ``assemble_file``."""
        stream = read_stream(self._file_authority(session_id), path, expected_version)
        try:
            yield stream
        finally:
            await stream.aclose()

    # -- scale-out (issue 16): several Hosts on one PostgreSQL store, see _cluster.py ---------
    async def _join_cluster(self, options: ScaleOut | None) -> None:
        if isinstance(self._store, SqliteStore):
            return  # one Host, one file; psycopg is not even imported
        from emelex.store.postgres import PostgresStore

        if isinstance(self._store, PostgresStore):
            self._cluster = Cluster(
                self._registry, self._store, options or ScaleOut(), self._session_config
            )
            await self._nursery.start(self._cluster.run)

    # -- live drafts (issue 15): streaming answers to live watchers ----------------------
    # Thin delegations: the work lives in _drafts.py and _drafting.py.
    def _attach_drafts(self, state: HostSession, subscriber: Subscriber) -> None:
        # A watcher joining mid-answer first gets each draft so far (from offset 0).
        for draft in state.drafts.current():
            subscriber.offer_draft(draft)
