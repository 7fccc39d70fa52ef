"""Shared by the workspace-file tests: a Host with one session on a fresh workspace."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import attrs

from emelex.agent import DenyAll
from emelex.app import Agent, WorkspacePolicy
from emelex.contracts import FileEntry, FilesPage, WorkspacePath
from emelex.service import Host
from emelex.testing import Say, ScriptedModel


@attrs.frozen
class FilesSession:
    host: Host
    session_id: str
    workspace: Path


def files_agent(hidden: tuple[str, ...] = ()) -> Agent:
    builder = (
        Agent.builder().name("files").instructions("Help.").model(ScriptedModel([[Say("ok")]]))
    )
    return builder.approver(DenyAll()).workspace_policy(WorkspacePolicy(hidden=hidden)).build()


@asynccontextmanager
async def files_session(
    tmp_path: Path, *, hidden: tuple[str, ...] = ()
) -> AsyncIterator[FilesSession]:
    """A Host whose state directory lies *inside* the session's workspace (the private
    state must stay invisible there)."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    async with Host.open(workspace / "host-state", agents={"files": files_agent(hidden)}) as host:
        created = await host.create_session("files", workspace, operation="files-1")
        yield FilesSession(host, created.session.id, workspace)


async def list_all(
    host: Host, session_id: str, path: WorkspacePath | None = None
) -> tuple[list[FilesPage], list[FileEntry]]:
    """Every page of a directory, following ``next_after``."""
    pages: list[FilesPage] = []
    after = None
    while True:
        page = await host.list_files(session_id, path, after=after)
        pages.append(page)
        if page.next_after is None:
            return pages, [entry for page in pages for entry in page.entries]
        after = page.next_after


def names(entries: list[FileEntry]) -> list[bytes]:
    return [entry.path.name for entry in entries]


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))
