"""HostAPI: the Host's operations as one async protocol.

The in-process :class:`~emelex.service.Host` and the wire :class:`~emelex.service.HostClient`
both implement it, so code (and the shared Host test suite) written against ``HostAPI``
runs the same on either. Every operation is async and checkpoints; a subscription is an
async context manager yielding its update stream. The route table (``_routes``) names
each wire operation's method here, and the client's methods are derived from it.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from emelex.contracts import (
    MAX_PATCH_PAGE_BYTES,
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
)


class HostAPI(Protocol):
    """What every Host answers, in process or over the wire (see the module docs)."""

    async def create_session(
        self,
        agent: str,
        workspace: str | os.PathLike[str],
        *,
        operation: str,
        title: str | None = None,
    ) -> CreateSessionReceipt: ...

    async def sessions(self) -> tuple[SessionInfo, ...]: ...

    async def send(self, session_id: str, text: str, *, operation: str) -> SendReceipt: ...

    async def stop(self, session_id: str, invocation_id: str, *, operation: str) -> StopReceipt: ...

    async def queue(self, session_id: str) -> QueueSnapshot: ...

    async def pending_interactions(self, session_id: str) -> PendingInteractions: ...

    async def interaction(self, session_id: str, interaction_id: str) -> Interaction: ...

    async def respond(
        self,
        session_id: str,
        interaction_id: str,
        response: InteractionResponse,
        *,
        operation: str,
    ) -> RespondReceipt: ...

    async def execute(
        self,
        agent: str,
        text: str,
        *,
        operation: str,
        attachments: Sequence[AttachmentMeta] = (),
        resource: bytes | AsyncIterable[bytes] | None = None,
    ) -> ExecuteReceipt: ...

    async def execute_result(self, session_id: str, invocation_id: str) -> ExecuteResult | None: ...

    async def start_worker(
        self,
        coordinator_id: str,
        origin: ForkWorker | AgentWorker,
        task: str,
        *,
        operation: str,
        tools: Sequence[str] | None = None,
    ) -> WorkerReceipt: ...

    async def workers(self, coordinator_id: str) -> WorkHubSnapshot: ...

    async def diagnostics(
        self,
        session_id: str,
        *,
        through: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> DiagnosticsPage: ...

    def watch_diagnostics(
        self, session_id: str
    ) -> AbstractAsyncContextManager[AsyncIterator[DiagnosticsRevision]]: ...

    async def fork(
        self,
        session_id: str,
        *,
        revision: int,
        operation: str,
        turn_id: str | None = None,
        tools: Sequence[str] | None = None,
        title: str | None = None,
    ) -> ForkReceipt: ...

    async def fork_receipt(self, session_id: str, *, operation: str) -> ForkReceipt | None: ...

    async def history(
        self,
        session_id: str,
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
    ) -> HistoryPage: ...

    async def read_row(
        self, session_id: str, position: Position, *, through: int | None = None
    ) -> HistoryRow | None: ...

    async def read_history(
        self, session_id: str, target: HistoryTarget, *, through: int | None = None
    ) -> HistoryReadResult: ...

    async def search(
        self,
        session_id: str,
        query: str,
        *,
        case_sensitive: bool = False,
        whole_word: bool = False,
        through: int | None = None,
        after: SearchCursor | Position | None = None,
    ) -> SearchPage: ...

    def watch(
        self, session_id: str, *, after: Position | None = None, live: bool = False
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchUpdate]]: ...

    async def context(self, session_id: str, *, through: int | None = None) -> ContextReport: ...

    async def git_status(self, session_id: str) -> GitStatus | None: ...

    async def git_diff(self, session_id: str, area: GitArea, path: bytes) -> GitDiff | None: ...

    async def snapshot_patch(self, session_id: str, *, operation: str) -> SnapshotPatchReceipt: ...

    async def read_patch(
        self,
        session_id: str,
        patch_id: str,
        *,
        offset: int = 0,
        limit: int = MAX_PATCH_PAGE_BYTES,
    ) -> PatchPage: ...

    async def list_files(
        self,
        session_id: str,
        path: WorkspacePath | None = None,
        *,
        after: WorkspacePath | None = None,
    ) -> FilesPage: ...

    def watch_files(
        self, session_id: str, path: WorkspacePath | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[WatchFilesUpdate]]: ...

    def read_file(
        self, session_id: str, path: WorkspacePath, *, expected_version: str | None = None
    ) -> AbstractAsyncContextManager[AsyncIterator[ReadFileUpdate]]: ...
