"""The Host's side of the workspace file operations: a session's authority, built from
its workspace, its agent's hidden paths and the Host's own private directory."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

from emelex.service.workspace._files_access import FileAuthority
from emelex.tools.workspace import HiddenPaths


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple[str, ...]) -> HiddenPaths:
    # Every file request builds its session's authority (a page of a listing, a read):
    # compiling the globs again each time cost more than the page (0.3 ms for two).
    # A HiddenPaths is immutable but for its bounded cache of verdicts, so requests on
    # worker threads can share one.
    return HiddenPaths(patterns)


def hidden_paths(hidden: Iterable[str]) -> HiddenPaths:
    """The compiled hidden paths of ``hidden`` (shared by equal pattern lists)."""
    patterns = tuple(hidden)
    if all(isinstance(pattern, str) for pattern in patterns):
        return _compiled(patterns)
    return HiddenPaths(patterns)  # raises its own typed error


def session_authority(
    workspace: str,
    hidden: Iterable[str],
    host_root: str | os.PathLike[str],
    identity: tuple[int, int] | None = None,
) -> FileAuthority:
    """The authority of a session on ``workspace``: the Host's state directory (and so
    everything the Host keeps below it) is never listed, walked into or read, unless it
    is the session's own managed workspace below it (Executor tasks); a root that is no
    longer ``identity`` (the directory the session was created on) is refused."""
    return FileAuthority(
        workspace, hidden_paths(hidden), (os.fspath(host_root),), identity=identity
    )


__all__ = ["hidden_paths", "session_authority"]
