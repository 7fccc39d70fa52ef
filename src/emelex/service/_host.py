"""The Host: one process owning the store and the engine, driven through operations.

Every mutation is made durable before it is answered: the event that records it and the
receipt of its operation reference commit in one store transaction, so a retried request
returns the original receipt and is never applied twice. Each session has a work queue
and one runner task that takes its invocations in order and runs them as turns; a turn's
rows, the end of its invocation and the settlement of its interactions commit together.
"""

from __future__ import annotations

import functools
import os
import pathlib
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from emelex.app import Agent, Engine, Harness
from emelex.contracts import (
    MAX_ATTACHMENT_BYTES,
    MAX_PAGE_SIZE,
    MAX_PATCH_PAGE_BYTES,
    MAX_QUERY_CHARS,
    AgentWorker,
    AttachmentMeta,
    ContextReport,
    CreateSessionReceipt,
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
    HistoryReadResult,
    HistoryRow,
    HistoryTarget,
    Interaction,
    InteractionResponse,
    PatchPage,
    PendingInteractions,
    Position,
    QueueSnapshot,
    ReadFileUpdate,
    RespondReceipt,
    SearchCursor,
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
    trusted,
)
from emelex.service._catch_up import ReadPage, catch_up
from emelex.service._cluster import Cluster, ScaleOut
from emelex.service._errors import (
    OperationConflict,
    ServiceError,
)
from emelex.service._recovery import recover
from emelex.service._registry import Services, SessionRegistry
from emelex.service._rows import page_row, store_position, wire_row
from emelex.service._runner import Runner, check_agents
from emelex.service._session import HostSession
from emelex.service._store import open_host_store
from emelex.service._watch import DEFAULT_WATCH_BUFFER, Subscriber, WatchStream
from emelex.service.ops import _admission, _executor, _forks, _interactions, _workhub
from emelex.service.ops._context import context_report
from emelex.service.ops._searching import search_cursor, search_page
from emelex.service.ops._source import read_target
from emelex.service.workspace._views import WorkspaceViews
from emelex.store import (
    AppendResult,
    NewEvent,
    OperationRecord,
    SqliteStore,
    Store,
)
from emelex.store import OperationConflict as StoreOperationConflict
from emelex.store import Position as StorePosition

#: Unfinished invocations one session's queue holds.
DEFAULT_QUEUE_CAPACITY: Final = 64


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
        self._max_attachment_bytes = max_attachment_bytes
        self._store = store
        self._agents = dict(agents)
        self._nursery = nursery
        self._watch_buffer = watch_buffer
        self._closed = False
        self._registry = SessionRegistry(
            capacity=queue_capacity,
            appender=self._appender,
            start_runner=lambda session: self._runner.start(session),
            is_closed=lambda: self._closed,
        )
        #: Set when the store is shared with other Hosts (PostgreSQL): see _cluster.py.
        self._cluster: Cluster | None = None
        self._runner = Runner(
            registry=self._registry,
            store=store,
            engine=engine,
            agents=self._agents,
            harnesses=self._harnesses,
            spawn=nursery.start_soon,
            cluster=lambda: self._cluster,
            titles=titles,
        )
        self._workspace = WorkspaceViews(self._registry, self._agents, root, lambda: self._closed)

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
        check_agents(agents, harnesses or {})
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
                    alone = host._cluster is None
                    await recover(
                        opened,
                        host._registry,
                        host._session_config,
                        settle_now=lambda agent: alone and agents[agent].on_restart == "settle",
                    )
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
        return await _admission.create_session(
            self._services, agent, workspace, operation=operation, title=title
        )

    async def sessions(self) -> tuple[SessionInfo, ...]:
        await trio.lowlevel.checkpoint()
        return tuple(state.info() for state in self._registry)

    # -- send and stop ----------------------------------------------------------------------
    async def send(self, session_id: str, text: str, *, operation: str) -> SendReceipt:
        """Admit ``text`` to the session's queue. Raises :class:`QueueFull` (nothing is
        admitted) when the queue is full."""
        return await _admission.send(self._services, session_id, text, operation=operation)

    async def stop(self, session_id: str, invocation_id: str, *, operation: str) -> StopReceipt:
        """Stop one invocation: a queued one leaves the queue; a running one is cancelled
        and settled by the harness rules (``stopping``); a finished one is left alone."""
        return await _admission.stop(self._services, session_id, invocation_id, operation=operation)

    async def queue(self, session_id: str) -> QueueSnapshot:
        await trio.lowlevel.checkpoint()
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
        event; pass the returned fence back unchanged while following ``next_after``).
        A fence past the newest event is clamped to it, and the clamped one returned."""
        through = self._fence(session_id, through)
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
        through = self._fence(session_id, through)
        row = await self._store.read_row(session_id, store_position(position), through=through)
        return None if row is None else wire_row(row)

    async def read_history(
        self, session_id: str, target: HistoryTarget, *, through: int | None = None
    ) -> HistoryReadResult:
        """Open ``target`` under the fence (clamped to the newest event; None: the
        newest): a row field such as a search hit's (internal rows too, when named) or
        the rows a raw event published. A target past the fence holds no rows."""
        fence = self._registry.get(session_id).history_fence(through)
        return await read_target(self._store, session_id, target, fence)

    async def search(
        self,
        session_id: str,
        query: str,
        *,
        case_sensitive: bool = False,
        whole_word: bool = False,
        through: int | None = None,
        after: SearchCursor | Position | None = None,
    ) -> SearchPage:
        """Hits of a literal ``query`` in up to one page of rows after ``after`` (a page's
        ``next_after``, or a row position) under the fence (clamped to the newest event,
        like every fence); a page may hold no hit while ``next_after`` is not None, and
        ends inside a row that holds more hits than fit."""
        through = self._fence(session_id, through)
        if not query or len(query) > MAX_QUERY_CHARS:
            raise ServiceError(f"a search query holds 1 to {MAX_QUERY_CHARS} characters")
        cursor = search_cursor(after)
        start, skip = None, None
        if cursor is not None:
            start = store_position(cursor.position)
            if cursor.within is not None:
                # Inside a row: scan from that row again, past the hits already returned.
                start = StorePosition(cursor.source_sequence, cursor.item_index - 1)
                skip = (cursor.source_sequence, cursor.item_index, cursor.within)
        # The store narrows the rows to those that may hold the query (a block scan);
        # the matcher decides, with the exact semantics, on the same reader thread.
        decide = functools.partial(
            search_page,
            query=query,
            case_sensitive=case_sensitive,
            whole_word=whole_word,
            skip=skip,
        )
        return await self._store.search_candidates_as(
            session_id,
            query,
            decide,
            case_sensitive=case_sensitive,
            through=through,
            after=start,
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
        stream = WatchStream(
            catch_up(state, subscriber, self._catch_up_page(session_id)), subscriber
        )
        try:
            yield stream
        finally:
            state.subscribers.discard(subscriber)
            await stream.aclose()

    def _catch_up_page(self, session_id: str) -> ReadPage:
        async def read(after: Position | None, through: int) -> HistoryPage:
            return await self.history(session_id, after=after, through=through)

        return read

    def _fence(self, session_id: str, through: int | None) -> int | None:
        """One rule for every read's fence: None is the newest event, and a fence past
        the newest event is that event (so a fixed fence never takes in later rows)."""
        session = self._registry.get(session_id)  # None below: the store's newest
        fence = session.history_fence(through)  # (it may hold events not yet followed)
        return None if through is None and fence == session.revision else fence

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
        self._runner.close()
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
            app_session=lambda session, stored: self._runner.app_session(session, stored=stored),
            private_dirs=self._workspace.private_dirs,
        )

    async def context(self, session_id: str, *, through: int | None = None) -> ContextReport:
        """The latest main request the session prepared as of the fence ``through``
        (None: now), also while it runs or after it was interrupted; None when the
        session prepared none of its own (copied history of a fork does not count)."""
        state = self._registry.get(session_id)
        await trio.lowlevel.checkpoint()
        return context_report(state, through)

    async def _session_config(self, session_id: str) -> dict[str, Any] | None:
        stored = await self._store.load_config(session_id)
        if not stored.get("host") or stored.get("agent") not in self._agents:
            return None
        return stored

    # -- workspace views (see workspace/_views.py) ------------------------------------------
    async def git_status(self, session_id: str) -> GitStatus | None:
        """Fresh status of the session's repository (None: its workspace holds none).
        The workspace must be the repository's root."""
        return await self._workspace.git_status(session_id)

    async def git_diff(self, session_id: str, area: GitArea, path: bytes) -> GitDiff | None:
        """One path's diff: ``staged`` HEAD->index, ``worktree`` index->working file,
        ``untracked`` empty->working file (None: no repository)."""
        return await self._workspace.git_diff(session_id, area, path)

    async def snapshot_patch(self, session_id: str, *, operation: str) -> SnapshotPatchReceipt:
        """Capture the session's completed work as an immutable patch once no turn that
        may write its workspace is running; a retry returns the original receipt."""
        return await self._workspace.snapshot_patch(self._services, session_id, operation)

    async def read_patch(
        self,
        session_id: str,
        patch_id: str,
        *,
        offset: int = 0,
        limit: int = MAX_PATCH_PAGE_BYTES,
    ) -> PatchPage:
        """Original bytes of a captured patch from ``offset``; follow ``next_offset``."""
        return await self._workspace.read_patch(self._services, session_id, patch_id, offset, limit)

    async def list_files(
        self,
        session_id: str,
        path: WorkspacePath | None = None,
        *,
        after: WorkspacePath | None = None,
    ) -> FilesPage:
        """One page (at most 128 entries) of the direct children of ``path`` (None: the
        workspace root) after ``after`` (a page's ``next_after``); see docs/service/files.md."""
        return await self._workspace.list_files(session_id, path, after)

    @asynccontextmanager
    async def watch_files(
        self, session_id: str, path: WorkspacePath | None = None
    ) -> AsyncIterator[AsyncIterator[WatchFilesUpdate]]:
        """``ready`` after the initial scan, then coalesced ``changed`` notifications
        (reread from the beginning) until ``unavailable``, ``error`` or ``end``."""
        stream = self._workspace.watch_files(session_id, path)
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
        stream = self._workspace.read_file(session_id, path, expected_version)
        try:
            yield stream
        finally:
            await stream.aclose()

    # -- scale-out: several Hosts on one PostgreSQL store (see _cluster.py) -------------------
    async def _join_cluster(self, options: ScaleOut | None) -> None:
        if isinstance(self._store, SqliteStore):
            return  # one Host, one file; psycopg is not even imported
        from emelex.store.postgres import PostgresStore

        if isinstance(self._store, PostgresStore):
            self._cluster = Cluster(
                self._registry, self._store, options or ScaleOut(), self._session_config
            )
            await self._nursery.start(self._cluster.run)

    # -- live drafts: streaming answers to live watchers -----------------------------------
    # Thin delegations: the work lives in _drafts.py and _drafting.py.
    def _attach_drafts(self, state: HostSession, subscriber: Subscriber) -> None:
        # A watcher joining mid-answer first gets each draft so far (from offset 0).
        for draft in state.drafts.current():
            subscriber.offer_draft(draft)
