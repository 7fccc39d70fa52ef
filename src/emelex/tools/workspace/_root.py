"""The workspace root descriptor and descriptor-by-descriptor path resolution.

Nothing here resolves a path to a string and then opens it: every component is opened
with ``openat(parent_fd, name, O_NOFOLLOW | ...)`` starting from the root descriptor that
:meth:`Workspace.open` took once. A symlink anywhere in a path is an error, never followed,
so a link swapped in between two calls (or during a walk) cannot redirect an operation.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

import attrs

from emelex.tools.workspace._errors import (
    ConcurrentModification,
    HiddenPath,
    NotADirectory,
    NotRegularFile,
    OutsideWorkspace,
    PathRejected,
    SecretPath,
    SymlinkRefused,
    WorkspaceClosed,
    WorkspaceError,
    WorkspaceIOError,
    map_os_error,
)
from emelex.tools.workspace._secrets import secret_reason
from emelex.tools.workspace._sibling import MAX_NAME_BYTES

if TYPE_CHECKING:
    from emelex.tools.workspace._hidden import HiddenPaths

MAX_PATH_BYTES = 4096
"""Longest accepted path text, in bytes once encoded (Linux ``PATH_MAX``)."""


_CLOEXEC = os.O_CLOEXEC
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
"""Flags that open a directory to list it; fail on symlinks and non-directories."""
PASS_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | _CLOEXEC
"""Flags for intermediate components: search permission is enough."""
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | _CLOEXEC
"""Flags that open a file to read it: never follow, never block on a FIFO or device."""


@attrs.frozen
class Target:
    """A parsed path: where to start and which components to walk.

    ``outside`` is true for an approved absolute path outside the root, walked from ``/``.
    ``parts`` never contains ``..``, ``.`` or empty names. ``display`` is the normalized
    path shown in results and errors: relative to the root (or, under a view such as
    ``/workspace``, absolute in the view), or absolute when outside.
    ``root`` holds the workspace root's components for an inside target, so secrets are
    judged on the absolute path (a workspace rooted in ``~/.ssh`` holds only secrets);
    ``view`` the components of the name the model sees the root by. Neither takes part
    in equality.
    """

    outside: bool
    parts: tuple[str, ...]
    root: tuple[str, ...] = attrs.field(default=(), eq=False, repr=False)
    view: tuple[str, ...] | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def display(self) -> str:
        if self.outside:
            return "/" + "/".join(self.parts)
        if self.view is not None:
            return "/" + "/".join((*self.view, *self.parts))
        return "/".join(self.parts) if self.parts else "."

    def child(self, name: str) -> Target:
        return self.with_parts((*self.parts, name))

    def with_parts(self, parts: tuple[str, ...]) -> Target:
        """Another path on the same side of the root, shown the same way."""
        return Target(self.outside, parts, self.root, self.view)

    @property
    def absolute_parts(self) -> tuple[str, ...]:
        """Every component from ``/`` (the root's, then the target's)."""
        return self.parts if self.outside else (*self.root, *self.parts)

    def secret_reason(self) -> str | None:
        """Why the path looks secret, judged on its absolute path, or ``None``."""
        return secret_reason(self.absolute_parts)


def _encoded_len(text: str) -> int:
    return len(os.fsencode(text))


def split_path(path: str) -> tuple[bool, tuple[str, ...]]:
    """Check the path text and split it: ``(absolute, components)``.

    Rules: no NUL, at most :data:`MAX_PATH_BYTES` bytes, no ``..`` component, no empty
    component (``a//b``), no component over :data:`MAX_NAME_BYTES` bytes. ``.`` components
    are dropped; one trailing ``/`` is accepted. ``~`` is an ordinary name, never expanded.
    """
    if not isinstance(path, str):
        raise PathRejected(repr(path), "path must be a string")
    if path == "":
        raise PathRejected(path, "empty path")
    if "\0" in path:
        raise PathRejected(path, "path contains a NUL byte")
    if _encoded_len(path) > MAX_PATH_BYTES:
        raise PathRejected(path[:64] + "...", f"path longer than {MAX_PATH_BYTES} bytes")
    absolute = path.startswith("/")
    body = path[1:] if absolute else path
    if body.endswith("/"):
        body = body[:-1]
    parts: list[str] = []
    if body:
        for name in body.split("/"):
            if name == "":
                raise PathRejected(path, "empty path component")
            if name == "..":
                raise PathRejected(path, "parent traversal ('..') is not allowed")
            if name == ".":
                continue
            if _encoded_len(name) > MAX_NAME_BYTES:
                raise PathRejected(path, f"a component is longer than {MAX_NAME_BYTES} bytes")
            parts.append(name)
    return absolute, tuple(parts)


def _target_below(
    root_parts: tuple[str, ...], path: str, view: tuple[str, ...] | None = None
) -> Target:
    """``path`` parsed relative to the root whose canonical components are ``root_parts``
    (a component-wise test: ``/ws_evil`` is not inside ``/ws``). Under a ``view`` the
    absolute path ``/<view>/...`` names the root too (``/workspacefoo`` is not inside
    ``/workspace``)."""
    absolute, parts = split_path(path)
    if not absolute:
        return Target(False, parts, root_parts, view)
    if view is not None and parts[: len(view)] == view:
        return Target(False, parts[len(view) :], root_parts, view)
    width = len(root_parts)
    if parts[:width] == root_parts:
        return Target(False, parts[width:], root_parts, view)
    return Target(True, parts)


def split_view(view: str) -> tuple[str, ...]:
    """The components of a view name such as ``/workspace`` (absolute, not ``/``)."""
    absolute, parts = split_path(view)
    if not absolute or not parts:
        raise PathRejected(view, "a view is an absolute path below '/', like '/workspace'")
    return parts


def classify_path(root: str, path: str, *, view: str | None = None) -> Target:
    """Parse ``path`` as the file tools would for a workspace whose canonical root is
    ``root`` (seen as ``view`` when given), without opening anything: what an approval
    policy needs to tell an outside or likely-secret path from an ordinary one. Raises
    ``PathRejected`` for path text no tool accepts; ``root`` must be canonical
    (``Workspace.root``)."""
    return _target_below(
        tuple(p for p in root.split("/") if p), path, None if view is None else split_view(view)
    )


def _canonical_of(fd: int, given: str) -> str:
    """The canonical absolute path of an open directory, checked against its identity."""
    info = os.fstat(fd)
    try:
        candidate = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        candidate = os.path.realpath(given)
    try:
        check = os.stat(candidate)
    except OSError as error:
        raise WorkspaceIOError(given, f"cannot name the root directory: {error}") from error
    if not candidate.startswith("/") or (check.st_dev, check.st_ino) != (
        info.st_dev,
        info.st_ino,
    ):
        raise WorkspaceIOError(given, "the root directory has no stable canonical path")
    return candidate


class Workspace:
    """An open workspace root: one directory descriptor every operation starts from.

    Create with :meth:`open`; close with :meth:`close` or use as a context manager. The
    descriptor pins the directory: renaming or replacing the root path afterwards does not
    move the workspace. Operations are thread-safe (they only use ``*at`` system calls on
    the shared descriptor); closing while operations run is the caller's error.
    """

    def __init__(
        self,
        fd: int,
        root: str,
        device: int,
        inode: int,
        *,
        hidden: HiddenPaths | None = None,
        view: str | None = None,
    ) -> None:
        self._fd = fd
        self._lock = threading.Lock()
        self.root = root
        """Canonical absolute path of the root, taken from the descriptor at open time."""
        self.device = device
        self.inode = inode
        self.opened_at = time.time()
        """Wall-clock time of opening: temporary files of interrupted writes whose inode
        last changed before it are stale (removed by the next write in their directory)."""
        self._root_parts = tuple(p for p in root.split("/") if p)
        self.hidden = hidden
        """Hidden paths (:class:`HiddenPaths`): refused by name, left out of walks."""
        self.view = view
        """The absolute name the model sees the root by (``/workspace``), or ``None``:
        paths below it name files inside, and results show inside paths below it."""
        self._view = None if view is None else split_view(view)
        self._clean_dirs: dict[tuple[int, int], int] = {}  # (dev, ino) -> mtime_ns cleaned

    @classmethod
    def open(
        cls,
        root: str | os.PathLike[str],
        *,
        hidden: HiddenPaths | None = None,
        view: str | None = None,
    ) -> Workspace:
        """Open ``root`` as the workspace.

        The application chooses the root, so a symlink in ``root`` itself is followed once
        here; the canonical path and ``(st_dev, st_ino)`` of the directory reached are
        recorded. Nothing the model supplies is ever followed. ``hidden`` paths are
        refused and never listed; under ``view`` (e.g. ``"/workspace"``) the model names
        the root by that absolute path and results show inside paths below it.
        """
        if view is not None:
            split_view(view)
        given = os.fspath(root)
        try:
            fd = os.open(given, os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC)
        except OSError as error:
            raise map_os_error(error, given) from error
        try:
            canonical = _canonical_of(fd, given)
            info = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, canonical, info.st_dev, info.st_ino, hidden=hidden, view=view)

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def fileno(self) -> int:
        """The root descriptor (owned by the workspace; do not close it)."""
        if self._fd < 0:
            raise WorkspaceClosed(self.root, "workspace is closed")
        return self._fd

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                fd, self._fd = self._fd, -1
                os.close(fd)

    def __enter__(self) -> Workspace:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"fd={self._fd}"
        return f"<Workspace {self.root!r} {state}>"

    # -- parsing ---------------------------------------------------------------------

    def target(self, path: str, *, allow_outside: bool = False) -> Target:
        """Parse ``path`` into a :class:`Target` without touching the filesystem.

        Relative paths are below the root. An absolute path whose leading components are
        exactly the root's canonical components (or the view's) is made relative (a
        component-wise test: ``/ws_evil`` is not inside ``/ws``). Any other absolute path
        raises :class:`OutsideWorkspace` unless ``allow_outside`` (the harness passes it
        only after a one-shot approval of this exact call). A hidden path raises
        :class:`HiddenPath`: no approval makes it visible.
        """
        target = self.classify(path)
        if target.outside and not allow_outside:
            shown = self.view or self.root
            raise OutsideWorkspace(path, f"absolute path outside the workspace {shown!r}")
        if self.hides(target):
            raise HiddenPath(target.display, "is hidden by the workspace policy")
        return target

    def classify(self, path: str) -> Target:
        """Parse ``path`` for an approval decision, without touching the filesystem.

        The result's ``outside`` says whether the path needs outside-root approval,
        ``secret_reason()`` whether it needs secret approval, and :meth:`hides` whether
        it is refused outright. Raises ``PathRejected`` for path text no approval can
        make acceptable.
        """
        return _target_below(self._root_parts, path, self._view)

    def hides(self, target: Target) -> bool:
        """Whether ``target`` (inside the root) or one of its ancestors is hidden."""
        return not target.outside and self.hidden is not None and self.hidden.hides(target.parts)

    def hides_entry(self, target: Target) -> bool:
        """Whether ``target``'s last component is hidden, its parent being visible."""
        return (
            not target.outside and self.hidden is not None and self.hidden.hides_last(target.parts)
        )

    def directory_path(self, path: str = ".", *, allow_outside: bool = False) -> str:
        """Verify ``path`` is a directory reachable without links; return its absolute path.

        For the shell tool's working directory. The check walks descriptors like every
        other operation, but the returned string is re-resolved by the child process's
        ``chdir``: a directory swapped for a link after this call is not detected (the
        shell is a host tool, not a sandbox).
        """
        target = self.target(path, allow_outside=allow_outside)
        os.close(self.open_dir(target, listable=False))
        if target.outside:
            return target.display
        return "/".join((self.root.rstrip("/"), *target.parts)) or "/"

    def check_secret(self, target: Target, allowed: bool) -> None:
        """Raise :class:`SecretPath` for a likely-secret target unless ``allowed``."""
        if allowed:
            return
        reason = target.secret_reason()
        if reason is not None:
            raise SecretPath(target.display, f"likely secret ({reason}); needs approval")

    # -- descriptor walking -------------------------------------------------------------

    def _base_fd(self, target: Target) -> int:
        """A new descriptor for the walk's starting directory (caller closes it)."""
        if target.outside:
            return os.open("/", PASS_FLAGS)
        return os.dup(self.fileno())

    def _refusal(self, parent_fd: int, name: str, shown: str, error: OSError) -> WorkspaceError:
        """Explain why opening ``name`` below ``parent_fd`` failed, precisely."""
        if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO, errno.EISDIR):
            try:
                info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            except OSError as second:
                return map_os_error(second, shown)
            if stat.S_ISLNK(info.st_mode):
                return SymlinkRefused(shown, "is a symbolic link (never followed)")
            if error.errno == errno.ENOTDIR:
                return NotADirectory(shown, "is not a directory")
            return NotRegularFile(shown, "is not a regular file")
        return map_os_error(error, shown)

    def open_dir(self, target: Target, *, listable: bool = True) -> int:
        """Walk every component of ``target`` as a directory; return a new descriptor.

        With ``listable`` the last descriptor can be listed (``O_RDONLY``); otherwise it is
        an ``O_PATH`` descriptor usable only as a ``dir_fd``.
        """
        return self._walk(target, len(target.parts), listable)

    def _walk(self, target: Target, count: int, listable: bool, create: bool = False) -> int:
        fd = self._base_fd(target)
        try:
            for index in range(count):
                name = target.parts[index]
                last = index == count - 1
                flags = DIR_FLAGS if (last and listable) else PASS_FLAGS
                shown = target.with_parts(target.parts[: index + 1]).display
                try:
                    child = os.open(name, flags, dir_fd=fd)
                except FileNotFoundError as error:
                    if not create:
                        raise self._refusal(fd, name, shown, error) from error
                    child = self._make_dir(fd, name, shown, flags)
                except OSError as error:
                    raise self._refusal(fd, name, shown, error) from error
                os.close(fd)
                fd = child
            if count == 0 and listable and target.outside:
                child = os.open(".", DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _make_dir(self, parent_fd: int, name: str, shown: str, flags: int) -> int:
        """Create the missing directory ``name`` and open it (never through a link)."""
        try:
            os.mkdir(name, 0o777, dir_fd=parent_fd)
        except FileExistsError:
            pass  # created concurrently: the O_NOFOLLOW open below still checks it
        except OSError as error:
            raise map_os_error(error, shown) from error
        try:
            return os.open(name, flags, dir_fd=parent_fd)
        except OSError as error:
            raise self._refusal(parent_fd, name, shown, error) from error

    def open_parent(self, target: Target, *, create: bool = False) -> tuple[int, str]:
        """Open the directory holding ``target``'s last component: ``(dir_fd, name)``.

        The descriptor is ``O_RDONLY`` so it can also be ``fsync``-ed after a rename. With
        ``create``, missing directories are made one component at a time (``mkdirat``
        followed by an ``O_NOFOLLOW`` open).
        """
        if not target.parts:
            raise NotRegularFile(target.display, "the workspace root is a directory")
        parent = target.with_parts(target.parts[:-1])
        fd = self._walk(parent, len(target.parts) - 1, True, create)
        return fd, target.parts[-1]

    def open_file_at(
        self, parent_fd: int, name: str, shown: str, flags: int = FILE_FLAGS
    ) -> tuple[int, os.stat_result]:
        """Open the regular file ``name`` below ``parent_fd`` without following or blocking.

        An ``lstat`` first refuses links and special files without opening them (opening
        some devices has side effects); the open itself uses ``O_NOFOLLOW | O_NONBLOCK``
        and the opened inode is checked again with ``fstat``, so a swap between the two
        steps is caught. ``O_NONBLOCK`` is cleared before returning.
        """
        try:
            before = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        except OSError as error:
            raise map_os_error(error, shown) from error
        if stat.S_ISLNK(before.st_mode):
            raise SymlinkRefused(shown, "is a symbolic link (never followed)")
        if not stat.S_ISREG(before.st_mode):
            raise NotRegularFile(shown, f"is not a regular file ({describe_mode(before.st_mode)})")
        try:
            fd = os.open(name, flags, dir_fd=parent_fd)
        except OSError as error:
            raise self._refusal(parent_fd, name, shown, error) from error
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotRegularFile(
                    shown, f"is not a regular file ({describe_mode(info.st_mode)})"
                )
            if (info.st_dev, info.st_ino) != (before.st_dev, before.st_ino):
                raise ConcurrentModification(
                    shown, "the file was replaced while it was being opened"
                )
            if flags & os.O_NONBLOCK:
                os.set_blocking(fd, True)
        except BaseException:
            os.close(fd)
            raise
        return fd, info

    def open_file(self, target: Target, flags: int = FILE_FLAGS) -> tuple[int, os.stat_result]:
        """Walk to ``target`` and open it as a regular file (see :meth:`open_file_at`)."""
        parent_fd, name = self.open_parent(target)
        try:
            return self.open_file_at(parent_fd, name, target.display, flags)
        finally:
            os.close(parent_fd)


def describe_mode(mode: int) -> str:
    """A short name for the file type in ``mode``."""
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "other"


__all__ = [
    "DIR_FLAGS",
    "FILE_FLAGS",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "PASS_FLAGS",
    "Target",
    "Workspace",
    "classify_path",
    "describe_mode",
    "split_path",
    "split_view",
]
