"""A Host's workspace views: git status and diffs, completed-work patches, file pages,
file watches and file reads, over one session's workspace.

Every view first checks that the session's workspace is still the directory it was
created on (a replaced directory is refused, not read), and reads through the session's
authority: its workspace, its agent's hidden paths and the Host's own private directory.
Git and patches load on first use, so opening a Host does not import dulwich.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Callable, Mapping

import trio

from emelex.app import Agent
from emelex.contracts import (
    FilesPage,
    GitArea,
    GitDiff,
    GitStatus,
    PatchPage,
    ReadFileUpdate,
    SnapshotPatchReceipt,
    WatchFilesUpdate,
    WorkspacePath,
)
from emelex.service._errors import UnknownAgent
from emelex.service._registry import Services, SessionRegistry
from emelex.service.workspace._files import NAMES as FILE_NAMES
from emelex.service.workspace._files_access import FileAuthority, check_identity
from emelex.service.workspace._files_host import session_authority
from emelex.service.workspace._files_pages import PageCache, list_files
from emelex.service.workspace._read_file import read_stream
from emelex.service.workspace._watch_files import watch_stream


class WorkspaceViews:
    """The workspace operations of one Host, given only what they read: the session
    registry, the agents (for hidden paths), the Host's root and whether it is closing."""

    def __init__(
        self,
        registry: SessionRegistry,
        agents: Mapping[str, Agent],
        root: os.PathLike[str],
        closed: Callable[[], bool],
    ) -> None:
        self._registry = registry
        self._agents = agents
        self._root = root
        self._closed = closed
        #: The Host's own state, never part of a workspace's work (when it lies inside).
        self.private_dirs = (os.path.realpath(root),)
        #: Pages read ahead for list_files, this Host's own.
        self.pages = PageCache()

    async def checked_workspace(self, session_id: str) -> str:
        """The session's workspace, once it is still the directory it was created on."""
        state = self._registry.get(session_id)
        await trio.to_thread.run_sync(check_identity, state.workspace, state.log.workspace_identity)
        return state.workspace

    async def git_status(self, session_id: str) -> GitStatus | None:
        from emelex.service.workspace._git import git_status

        return await git_status(await self.checked_workspace(session_id), self.private_dirs)

    async def git_diff(self, session_id: str, area: GitArea, path: bytes) -> GitDiff | None:
        from emelex.service.workspace._git import git_diff

        workspace = await self.checked_workspace(session_id)
        return await git_diff(workspace, area, path, self.private_dirs)

    async def snapshot_patch(
        self, services: Services, session_id: str, operation: str
    ) -> SnapshotPatchReceipt:
        from emelex.service.workspace._patch import snapshot_patch

        state = self._registry.get(session_id)
        self._registry.check_open()
        await self.checked_workspace(session_id)
        return await snapshot_patch(services, state, operation)

    async def read_patch(
        self, services: Services, session_id: str, patch_id: str, offset: int, limit: int
    ) -> PatchPage:
        from emelex.service.workspace._patch import read_patch

        self._registry.get(session_id)
        return await read_patch(services, session_id, patch_id, offset, limit)

    def authority(self, session_id: str) -> FileAuthority:
        """What the session's file operations may see; an unknown agent fails closed
        (its hidden paths are unknown here)."""
        state = self._registry.get(session_id)
        agent = self._agents.get(state.agent_name)
        if agent is None:
            raise UnknownAgent(f"the Host knows no agent named {state.agent_name!r}")
        return session_authority(
            state.workspace, agent.workspace_policy.hidden, self._root, state.log.workspace_identity
        )

    async def list_files(
        self, session_id: str, path: WorkspacePath | None, after: WorkspacePath | None
    ) -> FilesPage:
        authority = self.authority(session_id)
        return await list_files(self.pages, FILE_NAMES, authority, session_id, path, after)

    def watch_files(
        self, session_id: str, path: WorkspacePath | None
    ) -> AsyncGenerator[WatchFilesUpdate, None]:
        return watch_stream(self.authority(session_id), path, self._closed)

    def read_file(
        self, session_id: str, path: WorkspacePath, expected_version: str | None
    ) -> AsyncGenerator[ReadFileUpdate, None]:
        return read_stream(self.authority(session_id), path, expected_version)
