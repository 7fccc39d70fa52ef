"""A session's private workspace: a temporary directory seeded with the agent's files,
removed when the session closes."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from emelex.agent import InvalidWorkspace
from emelex.app._agent import SeedFile
from emelex.app._policy import HiddenPaths
from emelex.runtime import run_in_worker
from emelex.tools.workspace import Workspace, WorkspaceError


def make_private_workspace(name: str, files: Sequence[SeedFile]) -> str:
    root = tempfile.mkdtemp(prefix=f"emelex-{name}-")
    try:
        for seeded in files:
            path = os.path.join(root, *seeded.parts)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(seeded.content)
            if seeded.readonly:
                os.chmod(path, 0o444)
    except BaseException:
        remove_tree(root)
        raise
    return root


def remove_tree(root: str) -> None:
    def retry(function: Callable[..., Any], path: str, _info: Any) -> None:
        # A directory the agent made unwritable: make it writable and try again.
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, stat.S_IRWXU)
            function(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=retry)


def open_workspace(
    root: str, *, hidden: HiddenPaths | None = None, view: str | None = None
) -> Workspace:
    try:
        return Workspace.open(root, hidden=hidden, view=view)
    except WorkspaceError as exc:
        # What the standalone builder raises for a root it cannot open.
        raise InvalidWorkspace(f"cannot open workspace {root!r}: {exc}") from exc


__all__ = ["make_private_workspace", "open_workspace", "remove_tree"]


async def undo_start(
    workspace: Workspace | None,
    closers: Sequence[Callable[[], Awaitable[object]]],
    temporary: str | None,
) -> None:
    """Release what a failed session start opened (shielded: it runs while being
    cancelled): the workspace, the integrations in reverse, the private directory."""
    with trio.CancelScope(shield=True):
        if workspace is not None:
            workspace.close()
        for close in reversed(closers):
            await close()
        if temporary is not None:
            await run_in_worker(remove_tree, temporary, name="remove workspace")
