"""The Host's side of the workspace file operations: a session's authority, built from
its workspace, its agent's hidden paths and the Host's own private directory."""

from __future__ import annotations

import os
from collections.abc import Iterable

from emelex.service._files_access import FileAuthority
from emelex.tools.workspace import HiddenPaths


def session_authority(
    workspace: str, hidden: Iterable[str], host_root: str | os.PathLike[str]
) -> FileAuthority:
    """The authority of a session on ``workspace``: the Host's state directory (and so
    everything the Host keeps below it) is never listed, walked into or read, unless it
    is the session's own managed workspace below it (Executor tasks)."""
    return FileAuthority(workspace, HiddenPaths(tuple(hidden)), (os.fspath(host_root),))


__all__ = ["session_authority"]
