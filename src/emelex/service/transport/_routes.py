"""The route table: each Host operation and subscription over the wire, one line each.

A route names its wire operation, its request contract, the Host method that serves it
and its result (an operation's answer, or the update type a subscription streams). The
server (``_http``), the client (``_client``), the route document (``GET /v1/routes``) and
the security tests all read this one table, so a new operation joins by adding a line.
"""

from __future__ import annotations

import base64
import functools
import inspect
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

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
    HistoryReadRequest,
    HistoryReadResult,
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
from emelex.service._api import HostAPI
from emelex.service.ops._searching import search_cursor

Kind = Literal["op", "sub"]
#: How a value crosses between a method's argument and a request's field.
Convert = Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


@attrs.frozen(cache_hash=False)
class Route:
    """One wire operation (``op``: POST, one answer) or subscription (``sub``: WebSocket),
    declared once: its wire name, request and result contracts, and the HostAPI method
    that serves it. The request's fields are the method's arguments of the same names;
    the server calls the method with them, and the client's method builds the request
    from them (see :meth:`call` and ``_client.remote``)."""

    name: str
    kind: Kind
    request: type
    #: The answer's contract (``op``) or the contract of each update (``sub``).
    result: Any
    #: The HostAPI method (a subscription's returns an async context manager).
    method: str
    #: Whether an ``op`` may answer null.
    nullable: bool = False
    #: Whether the request may be followed by a binary resource (the method's
    #: ``resource`` argument; None without one).
    resource: bool = False
    #: Arguments the route itself implies (``watchLive``: ``live=True``).
    fixed: Mapping[str, Any] = attrs.field(factory=dict)
    #: Request fields the method does not take, as the client fills them.
    fill: Mapping[str, Any] = attrs.field(factory=dict)
    #: Per field: method argument -> request value (client), and back (server).
    encode: Mapping[str, Convert] = attrs.field(factory=dict)
    decode: Mapping[str, Convert] = attrs.field(factory=dict)
    #: The method's result -> the wire result (server), and back (client).
    answer: Convert = _same
    unwrap: Convert = _same

    @property
    def path(self) -> str:
        return f"/v1/{self.kind}/{self.name}"

    @functools.cached_property
    def fields(self) -> tuple[str, ...]:
        """The request's fields that are arguments of the method (a field the method
        does not take, such as a page size it fixes itself, keeps its default)."""
        accepted = inspect.signature(getattr(HostAPI, self.method)).parameters
        return tuple(f.name for f in attrs.fields(self.request) if f.name in accepted)

    def arguments(self, request: Any) -> dict[str, Any]:
        """The method's keyword arguments for ``request`` (server side)."""
        values = {f: self.decode.get(f, _same)(getattr(request, f)) for f in self.fields}
        return {**values, **self.fixed}

    def build(self, arguments: Mapping[str, Any]) -> Any:
        """The request for a method call's ``arguments`` (client side)."""
        values = {f: self.encode.get(f, _same)(arguments[f]) for f in self.fields}
        return self.request(**values, **self.fill)

    def call(self, host: Any, request: Any, resource: Any = None) -> Any:
        """``op``: ``await route.call(host, request)`` answers the wire result;
        ``sub``: ``async with route.call(host, request)`` streams its updates."""
        arguments = self.arguments(request)
        if self.resource:
            arguments["resource"] = resource
        target = getattr(host, self.method)
        if self.kind == "sub":
            return target(**arguments)
        return self._answered(target(**arguments))

    async def _answered(self, pending: Awaitable[Any]) -> Any:
        return self.answer(await pending)


def op(name: str, request: type, result: Any, method: str, **options: Any) -> Route:
    return Route(name, "op", request, result, method, **options)


def sub(name: str, request: type, update: Any, method: str, **options: Any) -> Route:
    return Route(name, "sub", request, update, method, **options)


def _sequence(value: Any) -> Any:
    return None if value is None else tuple(value)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _unb64(value: str) -> bytes:
    # The contract checked the base64 form; the Host takes the exact pathname bytes.
    return base64.b64decode(value, validate=True)


ROUTES: Final[tuple[Route, ...]] = (
    op(
        "createSession",
        CreateSessionRequest,
        CreateSessionReceipt,
        "create_session",
        encode={"workspace": os.fspath},
    ),
    op(
        "listSessions",
        ListSessionsRequest,
        SessionList,
        "sessions",
        answer=lambda sessions: SessionList(sessions=sessions),
        unwrap=lambda listed: listed.sessions,
    ),
    op("send", SendRequest, SendReceipt, "send"),
    op("stop", StopRequest, StopReceipt, "stop"),
    op("queue", QueueRequest, QueueSnapshot, "queue"),
    op(
        "pendingInteractions",
        PendingInteractionsRequest,
        PendingInteractions,
        "pending_interactions",
    ),
    op("interaction", InteractionRequest, Interaction, "interaction"),
    op("respond", RespondRequest, RespondReceipt, "respond"),
    op("history", HistoryPageRequest, HistoryPage, "history"),
    op("readRow", ReadRowRequest, HistoryRow, "read_row", nullable=True),
    op("readHistory", HistoryReadRequest, HistoryReadResult, "read_history"),
    # The Host scans a fixed page of rows per search: the field only fills the contract.
    op(
        "search",
        SearchRequest,
        SearchPage,
        "search",
        fill={"limit": 200},
        encode={"after": search_cursor},
    ),
    op("fork", ForkRequest, ForkReceipt, "fork", encode={"tools": _sequence}),
    op("forkReceipt", ForkReceiptRequest, ForkReceipt, "fork_receipt", nullable=True),
    op("diagnostics", DiagnosticsRequest, DiagnosticsPage, "diagnostics"),
    op("context", ContextRequest, ContextReport, "context"),
    op(
        "execute",
        ExecuteRequest,
        ExecuteReceipt,
        "execute",
        resource=True,
        encode={"attachments": tuple},
    ),
    op("executeResult", ExecuteResultRequest, ExecuteResult, "execute_result", nullable=True),
    op(
        "startWorker",
        StartWorkerRequest,
        WorkerReceipt,
        "start_worker",
        encode={"tools": _sequence},
    ),
    op("workers", WorkHubRequest, WorkHubSnapshot, "workers"),
    sub("watch", WatchRequest, WatchUpdate, "watch", fixed={"live": False}),
    # The same watch, with the running answer's drafts.
    sub("watchLive", WatchRequest, WatchUpdate, "watch", fixed={"live": True}),
    sub("watchDiagnostics", WatchDiagnosticsRequest, DiagnosticsRevision, "watch_diagnostics"),
    # The session's workspace: git, completed-work patches, files.
    op("gitStatus", GitStatusRequest, GitStatus, "git_status", nullable=True),
    op(
        "gitDiff",
        GitDiffRequest,
        GitDiff,
        "git_diff",
        nullable=True,
        encode={"path": _b64},
        decode={"path": _unb64},
    ),
    op("snapshotPatch", SnapshotPatchRequest, SnapshotPatchReceipt, "snapshot_patch"),
    op("readPatch", ReadPatchRequest, PatchPage, "read_patch"),
    op("listFiles", ListFilesRequest, FilesPage, "list_files"),
    sub("watchFiles", WatchFilesRequest, WatchFilesUpdate, "watch_files"),
    sub("readFile", ReadFileRequest, ReadFileUpdate, "read_file"),
)

#: Routes by path (``/v1/op/send`` ...).
BY_PATH: Final = {route.path: route for route in ROUTES}
#: Routes by wire name.
BY_NAME: Final = {route.name: route for route in ROUTES}
#: Routes by HostAPI method (a watch has two: plain and live).
BY_METHOD: Final[Mapping[str, tuple[Route, ...]]] = {
    method: tuple(r for r in ROUTES if r.method == method)
    for method in dict.fromkeys(r.method for r in ROUTES)
}
