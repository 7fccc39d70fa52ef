"""The route table: each Host operation and subscription over the wire, one line each.

A route names its wire operation, its request contract, the Host method that serves it
and its result (an operation's answer, or the update type a subscription streams). The
server (``_http``), the client (``_client``), the route document (``GET /v1/routes``) and
the security tests all read this one table, so a new operation joins by adding a line.
"""

from __future__ import annotations

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
    ForkReceipt,
    ForkReceiptRequest,
    ForkRequest,
    HistoryPage,
    HistoryPageRequest,
    HistoryRow,
    Interaction,
    InteractionRequest,
    ListSessionsRequest,
    PendingInteractions,
    PendingInteractionsRequest,
    QueueRequest,
    QueueSnapshot,
    ReadRowRequest,
    RespondReceipt,
    RespondRequest,
    SearchPage,
    SearchRequest,
    SendReceipt,
    SendRequest,
    SessionList,
    StartWorkerRequest,
    StopReceipt,
    StopRequest,
    WatchDiagnosticsRequest,
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


def _watch_diagnostics(
    host: Host, r: WatchDiagnosticsRequest
) -> AbstractAsyncContextManager[AsyncIterator[Any]]:
    return host.watch_diagnostics(r.session_id)


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
    sub("watchDiagnostics", WatchDiagnosticsRequest, DiagnosticsRevision, _watch_diagnostics),
)

#: Routes by path (``/v1/op/send`` ...).
BY_PATH: Final = {route.path: route for route in ROUTES}
#: Routes by wire name.
BY_NAME: Final = {route.name: route for route in ROUTES}
