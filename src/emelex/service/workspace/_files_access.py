"""A session's authority over its workspace files, and the no-follow descriptor walk.

Every operation reopens the session's workspace root (the application chose that path,
so it is followed once, like :meth:`emelex.tools.workspace.Workspace.open`) and walks
the requested relative bytes one component at a time with the workspace layer's
``O_NOFOLLOW`` flags: a symlink anywhere is refused, never followed, and a swap between
a check and its use cannot redirect the walk. ``.git``, the workspace marker, hidden
paths and the Host's private state are refused on the way and left out of listings,
whatever the workspace policy.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from typing import Final

import attrs

from emelex.service._errors import (
    FileAccessDenied,
    FileReadError,
    InvalidWorkspacePath,
    ServiceError,
    UnrepresentableName,
    WorkspacePathNotFound,
    WorkspaceUnavailable,
)
from emelex.tools.workspace import HiddenPaths

#: The directory that marks an emelex workspace (and holds a served Host's control
#: socket): never listed, never walked into.
WORKSPACE_MARKER: Final = b".emelex"
#: Names never listed nor walked into, at any depth.
CONTROL_NAMES: Final = frozenset({b".git", WORKSPACE_MARKER})

Identity = tuple[int, int]

# The workspace layer's open flags (emelex.tools.workspace): never follow a link, never
# block on a FIFO or a device, never inherit a descriptor across exec.
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Opens a directory to list it; fails on symlinks and non-directories."""
PASS_FLAGS: Final = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""Opens a directory only to walk through it (search permission is enough)."""
FILE_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""Opens a file to read it."""

_LOSSLESS = sys.getfilesystemencodeerrors() == "surrogateescape"


def exact_name(name: str) -> bytes:
    """The exact bytes of a name the OS returned as text; a name the platform cannot
    give back losslessly raises :class:`UnrepresentableName` instead of being converted."""
    try:
        raw = os.fsencode(name)
    except UnicodeError as exc:
        raise UnrepresentableName(f"{name!r} has no exact byte form here") from exc
    if not _LOSSLESS and os.fsdecode(raw) != name:
        raise UnrepresentableName(f"{name!r} cannot be represented losslessly")
    return raw


_UTF8_FS = sys.getfilesystemencoding() == "utf-8" and _LOSSLESS


def exact_names(names: list[str]) -> list[bytes]:
    """:func:`exact_name` of many names (one fast path for the usual UTF-8 platform)."""
    if _UTF8_FS:
        try:
            return [name.encode("utf-8", "surrogateescape") for name in names]
        except UnicodeError:
            pass  # one bad name: find it and name it below
    return [exact_name(name) for name in names]


#: This process's open descriptors as paths (Linux): a directory listed through one of
#: them gives its names as exact bytes, with no decoding to text and back.
_OWN_FDS: Final = "/proc/self/fd"
_BY_PROC = os.path.isdir(_OWN_FDS)


def list_names(fd: int) -> list[bytes]:
    """The exact names in the open directory ``fd`` (unsorted).

    Listing ``/proc/self/fd/N`` opens the very directory ``fd`` refers to (the kernel
    follows the descriptor, never a pathname), so it is the same listing, read as bytes.
    If that fails for any reason (no ``/proc``, the directory's permissions changed
    since ``fd`` was opened), ``fd`` itself is listed."""
    if _BY_PROC:
        try:
            return os.listdir(f"{_OWN_FDS}/{fd}".encode())
        except OSError:
            pass  # the descriptor itself decides
    return exact_names(os.listdir(fd))


def shown(raw: bytes) -> str:
    """A path for messages (undecodable bytes escaped, never the wire form)."""
    return raw.decode("utf-8", "backslashreplace") or "."


@attrs.define
class FileAuthority:
    """What one session may read: its workspace root, its hidden paths, and the Host's
    private directories (excluded wherever they appear, by physical identity).

    ``private`` holds their identities, found again each time the root is opened (a
    blocking call: build the authority anywhere, use it on a worker thread).
    """

    workspace: str
    hidden: HiddenPaths = attrs.field(factory=HiddenPaths, eq=False)
    private_dirs: tuple[str, ...] = ()
    private: frozenset[Identity] = frozenset()
    #: The root's identity as the session was created on (None: not recorded).
    identity: Identity | None = None

    @property
    def key(self) -> tuple[object, ...]:
        """What decides which names are visible (for caches of visible names)."""
        return (self.hidden.patterns, self.private)

    def open_root(self) -> tuple[int, os.stat_result]:
        """A new listable descriptor of the workspace root and its ``fstat``."""
        found = set()
        for directory in self.private_dirs:
            try:
                info = os.stat(directory)
            except OSError:
                continue  # not there (yet): nothing to exclude
            found.add((info.st_dev, info.st_ino))
        self.private = frozenset(found)
        try:
            fd = os.open(self.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:
            raise WorkspaceUnavailable(
                f"the session's workspace {self.workspace!r} cannot be opened: {exc.strerror}"
            ) from exc
        try:
            info = os.fstat(fd)
        except OSError as exc:
            os.close(fd)
            raise WorkspaceUnavailable(f"cannot inspect the workspace: {exc.strerror}") from exc
        if (info.st_dev, info.st_ino) in self.private:
            os.close(fd)
            raise WorkspaceUnavailable("the session's workspace is the Host's private state")
        if self.identity is not None and (info.st_dev, info.st_ino) != self.identity:
            os.close(fd)
            raise WorkspaceUnavailable(replaced(self.workspace))
        return fd, info

    def excluded(self, parts: tuple[bytes, ...]) -> bool:
        """Whether the last component of ``parts`` is never listed (its parent being
        visible): a control name, or hidden by the session's policy."""
        if parts[-1] in CONTROL_NAMES:
            return True
        if not self.hidden:
            return False
        return self.hidden.hides_last(tuple(os.fsdecode(part) for part in parts))

    def visible(self, parts: tuple[bytes, ...], names: list[bytes]) -> list[bytes]:
        """The names of ``names`` (children of the visible directory ``parts``) that
        are listed: :meth:`excluded` of each, with the parent's components decoded once
        for the whole directory instead of once a name."""
        if not self.hidden:
            return [name for name in names if name not in CONTROL_NAMES]
        parents = tuple(os.fsdecode(part) for part in parts)
        hides_last = self.hidden.hides_last
        decode = os.fsdecode
        return [
            name
            for name in names
            if name not in CONTROL_NAMES and not hides_last((*parents, decode(name)))
        ]

    def is_private(self, info: os.stat_result) -> bool:
        return (info.st_dev, info.st_ino) in self.private


def replaced(workspace: str) -> str:
    return (
        f"the session's workspace {workspace!r} is no longer the directory it was created"
        " on (it was moved or replaced)"
    )


def identity_of(path: str) -> Identity:
    """The (device, inode) of the directory at ``path`` (blocking)."""
    info = os.stat(path)
    return info.st_dev, info.st_ino


def check_identity(path: str, expected: Identity | None) -> None:
    """Raise :class:`WorkspaceUnavailable` unless ``path`` is still ``expected``
    (blocking; None: nothing recorded, nothing checked)."""
    if expected is None:
        return
    try:
        found = identity_of(path)
    except OSError as exc:
        raise WorkspaceUnavailable(
            f"the session's workspace {path!r} cannot be opened: {exc.strerror}"
        ) from exc
    if found != expected:
        raise WorkspaceUnavailable(replaced(path))


def split_parts(raw: bytes | None) -> tuple[bytes, ...]:
    """The components of a checked relative path (``None``: the root)."""
    return () if raw is None else tuple(raw.split(b"/"))


def os_failure(error: OSError, where: str) -> ServiceError:
    """The typed service error for an ``OSError`` met at ``where``."""
    if error.errno == errno.ENOENT:
        return WorkspacePathNotFound(f"{where}: no such file or directory")
    if error.errno in (errno.EACCES, errno.EPERM):
        return FileAccessDenied(f"{where}: {error.strerror}")
    if error.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return InvalidWorkspacePath(f"{where}: {error.strerror}")
    return FileReadError(f"{where}: {error.strerror or error}")


def _refusal(parent: int, name: bytes, where: str, error: OSError) -> ServiceError:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except OSError as second:
            return os_failure(second, where)
        if stat.S_ISLNK(info.st_mode):
            return InvalidWorkspacePath(f"{where} is a symbolic link (never followed)")
        return InvalidWorkspacePath(f"{where} is not a directory")
    return os_failure(error, where)


def walk_directory(
    authority: FileAuthority, root: int, parts: tuple[bytes, ...], *, listable: bool = True
) -> int:
    """A new descriptor of the directory ``parts`` below the open root ``root``: every
    component opened with ``O_NOFOLLOW``, checked against the control names, hidden
    paths and private identities. Listable descriptors are a fresh open file
    description (``openat(".")``), so concurrent scans never share a directory offset."""
    fd = os.open(".", PASS_FLAGS, dir_fd=root)
    try:
        for index, name in enumerate(parts):
            prefix = parts[: index + 1]
            where = shown(b"/".join(prefix))
            if authority.excluded(prefix):
                raise InvalidWorkspacePath(f"{where} is never listed")
            try:
                child = os.open(name, PASS_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise _refusal(fd, name, where, exc) from exc
            os.close(fd)
            fd = child
            if authority.is_private(os.fstat(fd)):
                raise InvalidWorkspacePath(f"{where} is the Host's private state")
        if listable:
            try:
                child = os.open(".", DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                raise os_failure(exc, shown(b"/".join(parts))) from exc
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_directory(
    authority: FileAuthority, parts: tuple[bytes, ...]
) -> tuple[int, os.stat_result, os.stat_result]:
    """Open the session's root, then the directory ``parts``: ``(fd, root_info, info)``."""
    root, root_info = authority.open_root()
    try:
        fd = walk_directory(authority, root, parts)
    finally:
        os.close(root)
    try:
        return fd, root_info, os.fstat(fd)
    except OSError as exc:
        os.close(fd)
        raise os_failure(exc, shown(b"/".join(parts))) from exc


def identity_text(info: os.stat_result) -> str:
    return f"{info.st_dev}:{info.st_ino}"


__all__ = [
    "CONTROL_NAMES",
    "DIR_FLAGS",
    "FILE_FLAGS",
    "PASS_FLAGS",
    "WORKSPACE_MARKER",
    "FileAuthority",
    "check_identity",
    "identity_of",
    "replaced",
    "Identity",
    "exact_name",
    "exact_names",
    "identity_text",
    "list_names",
    "open_directory",
    "os_failure",
    "shown",
    "split_parts",
    "walk_directory",
]
