"""The route table: each Host operation and subscription over the wire, one line each.

A route names its wire operation, its request contract, the Host method that serves it
and its result (an operation's answer, or the update type a subscription streams). The
server (``_http``), the client (``_client``), the route document (``GET /v1/routes``) and
the security tests all read this one table, so a new operation joins by adding a line.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, Literal

import attrs

from emelex.contracts import (
    ContextReport,
    ContextRequest,
    CreateSessionReceipt,
    CreateSessionRequest,
    DiagnosticsPage,
    DiagnosticsRequest,
    DiagnosticsRevision,
    ExecuteReceipt,
    ExecuteRequest,
    ExecuteResult,
    ExecuteResultRequest,
    FilesPage,
    ForkReceipt,
    ForkReceiptRequest,
    ForkRequest,
    GitDiff,
    GitDiffRequest,
    GitStatus,
    GitStatusRequest,
    HistoryPage,
    HistoryPageRequest,
    HistoryRow,
    Interaction,
    InteractionRequest,
    ListFilesRequest,
    ListSessionsRequest,
    PatchPage,
    PendingInteractions,
    PendingInteractionsRequest,
    QueueRequest,
    QueueSnapshot,
    ReadFileRequest,
    ReadFileUpdate,
    ReadPatchRequest,
    ReadRowRequest,
    RespondReceipt,
    RespondRequest,
    SearchPage,
    SearchRequest,
    SendReceipt,
    SendRequest,
    SessionList,
    SnapshotPatchReceipt,
    SnapshotPatchRequest,
    StartWorkerRequest,
    StopReceipt,
    StopRequest,
    WatchDiagnosticsRequest,
    WatchFilesRequest,
    WatchFilesUpdate,
    WatchRequest,
    WatchUpdate,
    WorkerReceipt,
    WorkHubRequest,
    WorkHubSnapshot,
)

if TYPE_CHECKING:
    from emelex.service._host import Host

Kind = Literal["op", "sub"]
Call = Callable[["Host", Any], Awaitable[Any]]
Open = Callable[["Host", Any], AbstractAsyncContextManager[AsyncIterator[Any]]]


@attrs.frozen
class Route:
    """One wire operation (``op``: POST, one answer) or subscription (``sub``: WebSocket)."""

    name: str
    kind: Kind
    request: type
    #: The answer's contract (``op``) or the contract of each update (``sub``).
    result: Any
    #: Whether an ``op`` may answer null.
    nullable: bool
    #: ``op``: ``await call(host, request)``; ``sub``: ``async with call(host, request)``.
    call: Any
    #: Whether the request may be followed by a binary resource (``call`` then takes it
    #: as a third argument, None without one).
    resource: bool = False

    @property
    def path(self) -> str:
        return f"/v1/{self.kind}/{self.name}"


def op(
    name: str,
    request: type,
    result: Any,
    call: Any,
    *,
    nullable: bool = False,
    resource: bool = False,
) -> Route:
    return Route(name, "op", request, result, nullable, call, resource)


def sub(name: str, request: type, update: Any, call: Open) -> Route:
    return Route(name, "sub", request, update, False, call)


# Functions rather than lambdas: mypy infers a decorated method's type late inside the
# service's import cycle, and defers function bodies until it has.
def _watch(host: Host, r: WatchRequest) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    return host.watch(r.session_id, after=r.after)


def _watch_live(host: Host, r: WatchRequest) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    # The same watch, with the running answer's drafts (issue 15).
    return host.watch(r.session_id, after=r.after, live=True)


def _watch_diagnostics(
    host: Host, r: WatchDiagnosticsRequest
) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    return host.watch_diagnostics(r.session_id)


def _watch_files(
    host: Host, r: WatchFilesRequest
) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    return host.watch_files(r.session_id, r.path)


def _read_file(host: Host, r: ReadFileRequest) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    return host.read_file(r.session_id, r.path, expected_version=r.expected_version)


async def _git_diff(host: Host, r: GitDiffRequest) -> GitDiff | None:
    # The contract checked the base64 form; the Host takes the exact pathname bytes.
    return await host.git_diff(r.session_id, r.area, base64.b64decode(r.path, validate=True))


async def _sessions(host: Host, _: ListSessionsRequest) -> SessionList:
    return SessionList(sessions=host.sessions())


async def _queue(host: Host, request: QueueRequest) -> QueueSnapshot:
    return host.queue(request.session_id)


async def _execute(
    host: Host, r: ExecuteRequest, resource: AsyncIterator[bytes] | None
) -> ExecuteReceipt:
    return await host.execute(
        r.agent, r.text, operation=r.operation, attachments=r.attachments, resource=resource
    )


ROUTES: Final[tuple[Route, ...]] = (
    op(
        "createSession",
        CreateSessionRequest,
        CreateSessionReceipt,
        lambda h, r: h.create_session(r.agent, r.workspace, operation=r.operation, title=r.title),
    ),
    op("listSessions", ListSessionsRequest, SessionList, _sessions),
    op(
        "send",
        SendRequest,
        SendReceipt,
        lambda h, r: h.send(r.session_id, r.text, operation=r.operation),
    ),
    op(
        "stop",
        StopRequest,
        StopReceipt,
        lambda h, r: h.stop(r.session_id, r.invocation_id, operation=r.operation),
    ),
    op("queue", QueueRequest, QueueSnapshot, _queue),
    op(
        "pendingInteractions",
        PendingInteractionsRequest,
        PendingInteractions,
        lambda h, r: h.pending_interactions(r.session_id),
    ),
    op(
        "interaction",
        InteractionRequest,
        Interaction,
        lambda h, r: h.interaction(r.session_id, r.interaction_id),
    ),
    op(
        "respond",
        RespondRequest,
        RespondReceipt,
        lambda h, r: h.respond(r.session_id, r.interaction_id, r.response, operation=r.operation),
    ),
    op(
        "history",
        HistoryPageRequest,
        HistoryPage,
        lambda h, r: h.history(r.session_id, through=r.through, after=r.after, limit=r.limit),
    ),
    op(
        "readRow",
        ReadRowRequest,
        HistoryRow,
        lambda h, r: h.read_row(r.session_id, r.position, through=r.through),
        nullable=True,
    ),
    op(
        "search",
        SearchRequest,
        SearchPage,
        lambda h, r: h.search(
            r.session_id,
            r.query,
            case_sensitive=r.case_sensitive,
            whole_word=r.whole_word,
            through=r.through,
            after=r.after,
        ),
    ),
    op(
        "fork",
        ForkRequest,
        ForkReceipt,
        lambda h, r: h.fork(
            r.session_id,
            revision=r.revision,
            operation=r.operation,
            turn_id=r.turn_id,
            tools=r.tools,
            title=r.title,
        ),
    ),
    op(
        "forkReceipt",
        ForkReceiptRequest,
        ForkReceipt,
        lambda h, r: h.fork_receipt(r.session_id, operation=r.operation),
        nullable=True,
    ),
    op(
        "diagnostics",
        DiagnosticsRequest,
        DiagnosticsPage,
        lambda h, r: h.diagnostics(r.session_id, through=r.through, before=r.before, limit=r.limit),
    ),
    op(
        "context",
        ContextRequest,
        ContextReport,
        lambda h, r: h.context(r.session_id, through=r.through),
    ),
    op("execute", ExecuteRequest, ExecuteReceipt, _execute, resource=True),
    op(
        "executeResult",
        ExecuteResultRequest,
        ExecuteResult,
        lambda h, r: h.execute_result(r.session_id, r.invocation_id),
        nullable=True,
    ),
    op(
        "startWorker",
        StartWorkerRequest,
        WorkerReceipt,
        lambda h, r: h.start_worker(
            r.coordinator_id, r.origin, r.task, operation=r.operation, tools=r.tools
        ),
    ),
    op("workers", WorkHubRequest, WorkHubSnapshot, lambda h, r: h.workers(r.coordinator_id)),
    sub("watch", WatchRequest, WatchUpdate, _watch),
    sub("watchLive", WatchRequest, WatchUpdate, _watch_live),
    sub("watchDiagnostics", WatchDiagnosticsRequest, DiagnosticsRevision, _watch_diagnostics),
    # The session's workspace (issue 14): git, completed-work patches, files.
    op(
        "gitStatus",
        GitStatusRequest,
        GitStatus,
        lambda h, r: h.git_status(r.session_id),
        nullable=True,
    ),
    op("gitDiff", GitDiffRequest, GitDiff, _git_diff, nullable=True),
    op(
        "snapshotPatch",
        SnapshotPatchRequest,
        SnapshotPatchReceipt,
        lambda h, r: h.snapshot_patch(r.session_id, operation=r.operation),
    ),
    op(
        "readPatch",
        ReadPatchRequest,
        PatchPage,
        lambda h, r: h.read_patch(r.session_id, r.patch_id, offset=r.offset, limit=r.limit),
    ),
    op(
        "listFiles",
        ListFilesRequest,
        FilesPage,
        lambda h, r: h.list_files(r.session_id, r.path, after=r.after),
    ),
    sub("watchFiles", WatchFilesRequest, WatchFilesUpdate, _watch_files),
    sub("readFile", ReadFileRequest, ReadFileUpdate, _read_file),
)

#: Routes by path (``/v1/op/send`` ...).
BY_PATH: Final = {route.path: route for route in ROUTES}
#: Routes by wire name.
BY_NAME: Final = {route.name: route for route in ROUTES}
