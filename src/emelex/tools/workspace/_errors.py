"""The ``WorkspaceError`` subtree.

Every refusal made by the workspace layer is one of these classes, so the tool layer can
turn each into a precise message for the model (and tests can assert the exact reason).
Operating-system errors are mapped with :func:`map_os_error`; an ``errno`` that has no
dedicated class becomes :class:`WorkspaceIOError` and keeps its number.
"""

from __future__ import annotations

import errno as _errno
import threading

from emelex.tools._errors import ToolsError


class WorkspaceError(ToolsError):
    """Base class of every error raised by :mod:`emelex.tools.workspace`.

    ``path`` is the path as the caller gave it (or the part of it that was refused).
    """

    def __init__(self, path: str, detail: str) -> None:
        self.path = path
        self.detail = detail
        super().__init__(f"{path!r}: {detail}")


class WorkspaceClosed(WorkspaceError):
    """The workspace's root descriptor was already closed."""


class InvalidArgument(WorkspaceError):
    """An operation argument is malformed (for example an empty ``old`` text in an edit)."""


class PathRejected(WorkspaceError):
    """The path text itself is refused: ``..``, an empty component, NUL, over-long names."""


class OutsideWorkspace(WorkspaceError):
    """An absolute path lies outside the workspace root and was not approved."""


class HiddenPath(WorkspaceError):
    """The path (or a directory above it) is hidden by the workspace policy."""


class SymlinkRefused(WorkspaceError):
    """A path component (final or intermediate) is a symbolic link; links are never followed."""


class NotFound(WorkspaceError):
    """A path component does not exist."""


class NotADirectory(WorkspaceError):
    """A component used as a directory is something else."""


class NotRegularFile(WorkspaceError):
    """The target is a directory, FIFO, socket or device where a regular file is required."""


class NotTextFile(WorkspaceError):
    """The file holds binary data (NUL bytes or invalid UTF-8) where text is required."""


class PermissionDenied(WorkspaceError):
    """The operating system refused access (``EACCES``/``EPERM``/``EROFS``)."""


class SecretPath(WorkspaceError):
    """The path looks like it holds credentials and the call was not approved for secrets."""


class PatternError(WorkspaceError):
    """A search or glob pattern does not compile."""


class OperationAborted(WorkspaceError):
    """The caller asked a running operation to stop (its ``abort`` event was set).

    Long operations (searches, reads far into a file) check the event between bounded
    chunks of work, so they stop within milliseconds of it being set.
    """


def check_abort(abort: threading.Event | None, path: str) -> None:
    """Raise :class:`OperationAborted` if ``abort`` is set."""
    if abort is not None and abort.is_set():
        raise OperationAborted(path, "stopped: the operation was cancelled")


class EditMismatch(WorkspaceError):
    """An edit's precondition failed: occurrence count or content hash differs.

    ``kind`` is ``"count"`` or ``"sha256"``; ``expected``/``actual`` hold the two values.
    """

    def __init__(self, path: str, kind: str, expected: int | str, actual: int | str) -> None:
        self.kind = kind
        self.expected = expected
        self.actual = actual
        if kind == "count":
            detail = f"expected {expected} occurrence(s) of the old text, found {actual}"
        else:
            detail = f"content sha256 is {actual}, expected {expected}"
        super().__init__(path, detail)


class ConcurrentModification(WorkspaceError):
    """Another writer replaced or changed the file while it was being mutated.

    The mutation was not applied. ``recovery_path`` is ``None`` when the other writer's
    version was put back in place; otherwise it names the sibling file (relative to the
    same directory as the target) that now holds the prior inode, so nothing is lost.
    """

    def __init__(self, path: str, detail: str, recovery_path: str | None = None) -> None:
        self.recovery_path = recovery_path
        if recovery_path is not None:
            detail += f"; the previous file was kept as {recovery_path!r}"
        super().__init__(path, detail)


class AtomicRenameUnsupported(WorkspaceError):
    """The filesystem cannot exchange two names atomically (``renameat2`` unsupported)."""


class WorkspaceIOError(WorkspaceError):
    """Any other operating-system error; ``errno`` keeps the original number."""

    def __init__(self, path: str, detail: str, errno: int | None = None) -> None:
        self.errno = errno
        super().__init__(path, detail)


def map_os_error(error: OSError, path: str) -> WorkspaceError:
    """Translate an ``OSError`` into the most precise :class:`WorkspaceError`.

    The mapping is deliberately narrow: ``ENOENT`` means "not found", never "free to create".
    ``ELOOP`` is only produced by ``O_NOFOLLOW`` opens here, so it means a symlink.
    """
    code = error.errno
    reason = error.strerror or type(error).__name__
    if code == _errno.ENOENT:
        return NotFound(path, "no such file or directory")
    if code == _errno.ELOOP:
        return SymlinkRefused(path, "is a symbolic link (never followed)")
    if code == _errno.ENOTDIR:
        return NotADirectory(path, "a path component is not a directory")
    if code == _errno.EISDIR:
        return NotRegularFile(path, "is a directory")
    if code in (_errno.EACCES, _errno.EPERM, _errno.EROFS):
        return PermissionDenied(path, reason)
    if code == _errno.ENAMETOOLONG:
        return PathRejected(path, "name too long")
    if code in (_errno.ENXIO, _errno.ENODEV):
        return NotRegularFile(path, "is a device or special file")
    return WorkspaceIOError(path, reason, code)
