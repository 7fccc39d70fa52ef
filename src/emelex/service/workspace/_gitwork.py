"""The working tree seen from the index: a descriptor walk, stat cache and blob hashing.

Every directory is opened with ``openat(parent, name, O_NOFOLLOW | O_DIRECTORY)`` from
the workspace root descriptor, and every file through the workspace layer's no-follow
open, so a symlink swapped in during the walk cannot make the Host read outside the
workspace: symlinks are compared as links (their target bytes), never followed. Like
Git, a tracked file whose stat data still matches its index entry (and is not racily
clean) is not read at all.
"""

from __future__ import annotations

import bisect
import errno
import hashlib
import io
import os
import stat
import sys
import threading
from typing import Final

import attrs
from dulwich.ignore import IgnoreFilter, IgnoreFilterManager, read_ignore_patterns

from emelex.contracts import MAX_GIT_ENTRIES
from emelex.service._errors import GitLimitExceeded, GitRepositoryError
from emelex.service.workspace._gitformat import (
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_SYMLINK,
    Side,
    blob_id,
)
from emelex.service.workspace._gitindex import MODE_BITS, TYPE_BITS, Tracked
from emelex.service.workspace._gitrepo import (
    MAX_CONTROL_FILE_BYTES,
    Repository,
    check,
    raise_for_attributes,
)
from emelex.tools.workspace import (
    NotFound,
    PermissionDenied,
    Target,
    Workspace,
    WorkspaceError,
)

#: How the walk opens a directory below its parent: never through a link (the flags the
#: workspace layer lists directories with).
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MASK: Final = 0xFFFFFFFF
_FS_ENCODING: Final = sys.getfilesystemencoding()
_CHUNK: Final = 1024 * 1024
#: Check the abort flag every 128 entries of a directory (and between directories).
_CHECK_MASK: Final = 127


@attrs.frozen
class Change:
    """One changed path of an area: modes and blob names of both sides (None: absent
    or, for a working file, not hashed)."""

    path: bytes
    old_mode: int | None
    new_mode: int | None
    old_oid: str | None
    new_oid: str | None


@attrs.frozen
class Special:
    """The working path exists but is neither a regular file nor a symlink: a directory
    (Git: the file was deleted), or a FIFO, socket or device (Git: modified, unreadable)."""

    directory: bool


def work_mode(st_mode: int, index_mode: int | None, file_mode: bool) -> int | None:
    """The Git mode of a working entry (None: a directory, FIFO, socket or device)."""
    if stat.S_ISLNK(st_mode):
        return MODE_SYMLINK
    if not stat.S_ISREG(st_mode):
        return None
    if not file_mode and index_mode in (MODE_FILE, MODE_EXECUTABLE):
        return index_mode
    return MODE_EXECUTABLE if st_mode & stat.S_IXUSR else MODE_FILE


def stat_matches(tracked: Tracked, info: os.stat_result, index_mtime_ns: int) -> bool:
    """Git's stat cache: unchanged stat data means unchanged content, unless the entry
    is racily clean (written in the same instant as the index or later)."""
    mtime = tracked.mtime_s * 1_000_000_000 + tracked.mtime_ns
    return (
        mtime < index_mtime_ns
        and mtime == info.st_mtime_ns
        and tracked.ctime_s * 1_000_000_000 + tracked.ctime_ns == info.st_ctime_ns
        and tracked.size == info.st_size & _MASK
        and tracked.ino == info.st_ino & _MASK
        and tracked.uid == info.st_uid & _MASK
        and tracked.gid == info.st_gid & _MASK
    )


def _exists(dir_fd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    return True


def _shown(path: bytes) -> str:
    return os.fsdecode(path)


def _map(exc: WorkspaceError, path: bytes) -> GitRepositoryError:
    return GitRepositoryError(f"cannot read {_shown(path)!r}: {exc}")


def hash_file(
    workspace: Workspace, dir_fd: int, name: str, path: bytes, abort: threading.Event | None
) -> str | None:
    """The blob name of a regular file below ``dir_fd``; None when it changed, vanished
    or was swapped for something else while read (the caller reports it modified)."""
    try:
        fd, info = workspace.open_file_at(dir_fd, name, _shown(path))
    except PermissionDenied as exc:
        raise _map(exc, path) from exc
    except WorkspaceError:
        return None
    try:
        digest = hashlib.sha1(b"blob %d\0" % info.st_size, usedforsecurity=False)
        total = 0
        while chunk := os.read(fd, _CHUNK):
            total += len(chunk)
            if total > info.st_size:
                return None
            digest.update(chunk)
            check(abort)
    except OSError as exc:
        raise GitRepositoryError(f"cannot read {_shown(path)!r}: {exc}") from exc
    finally:
        os.close(fd)
    return digest.hexdigest() if total == info.st_size else None


def _link_target(dir_fd: int, name: bytes, path: bytes) -> bytes | None:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EINVAL):
            return None  # gone, or no longer a link: the caller reports a change
        raise GitRepositoryError(f"cannot read the link {_shown(path)!r}: {exc}") from exc


def _read_fd(fd: int, size: int, limit: int, path: bytes) -> bytes:
    if size > limit:
        raise GitLimitExceeded("working file bytes", limit, size)
    chunks = []
    total = 0
    while chunk := os.read(fd, min(_CHUNK, limit + 1 - total)):
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise GitLimitExceeded("working file bytes", limit, total)
    return b"".join(chunks)


def _target(path: bytes) -> Target:
    return Target(False, tuple(os.fsdecode(part) for part in path.split(b"/")))


def read_work(
    repo: Repository, path: bytes, limit: int, index_mode: int | None
) -> Side | Special | None:
    """The working side of ``path`` (complete content, at most ``limit`` bytes); None
    when absent (also below a symlink or a file), :class:`Special` for other types."""
    workspace = repo.workspace
    try:
        dir_fd, name = workspace.open_parent(_target(path))
    except PermissionDenied as exc:
        raise _map(exc, path) from exc
    except WorkspaceError:
        return None
    try:
        try:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise GitRepositoryError(f"cannot stat {_shown(path)!r}: {exc}") from exc
        mode = work_mode(info.st_mode, index_mode, repo.file_mode)
        if mode is None:
            return Special(directory=stat.S_ISDIR(info.st_mode))
        if mode == MODE_SYMLINK:
            target = _link_target(dir_fd, os.fsencode(name), path)
            if target is None:
                return None
            return Side(mode, blob_id(target), target)
        try:
            fd, opened = workspace.open_file_at(dir_fd, name, _shown(path))
        except NotFound:
            return None
        except WorkspaceError as exc:
            raise _map(exc, path) from exc
        try:
            data = _read_fd(fd, opened.st_size, limit, path)
        except OSError as exc:
            raise GitRepositoryError(f"cannot read {_shown(path)!r}: {exc}") from exc
        finally:
            os.close(fd)
        return Side(mode, blob_id(data), data)
    finally:
        os.close(dir_fd)


def read_control(workspace: Workspace, path: bytes) -> bytes | None:
    """A workspace control file (``.gitignore``, ``.gitattributes``), bounded; None when
    absent or not a regular file (Git does not follow a symlinked one either)."""
    try:
        fd, info = workspace.open_file(_target(path))
    except PermissionDenied as exc:
        raise _map(exc, path) from exc
    except WorkspaceError:
        return None
    try:
        return _read_fd(fd, info.st_size, MAX_CONTROL_FILE_BYTES, path)
    except OSError as exc:
        raise GitRepositoryError(f"cannot read {_shown(path)!r}: {exc}") from exc
    finally:
        os.close(fd)


class Ignores(IgnoreFilterManager):
    """dulwich's Git-compatible ignore rules, with per-directory ``.gitignore`` files
    read through the workspace layer (never through a followed link)."""

    def __init__(self, repo: Repository) -> None:
        global_filters: list[IgnoreFilter] = []
        exclude = os.path.join(repo.repo.controldir(), "info", "exclude")
        try:
            user = repo.config.get((b"core",), b"excludesFile")
            user_path: str | None = os.path.expanduser(os.fsdecode(user))
        except KeyError:
            xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
            user_path = os.path.join(xdg, "git", "ignore")
        for candidate in (exclude, user_path):
            if candidate is None:
                continue
            try:
                global_filters.append(IgnoreFilter.from_path(candidate))
            except OSError:
                continue
        super().__init__(repo.workspace.root, global_filters, False)
        self._workspace = repo.workspace
        self._loaded: dict[str, IgnoreFilter | None] = {}

    def _load_path(self, path: str) -> IgnoreFilter | None:
        if path in self._loaded:
            return self._loaded[path]
        name = os.fsencode(path + "/.gitignore" if path else ".gitignore")
        data = read_control(self._workspace, name)
        found = None if data is None else IgnoreFilter(read_ignore_patterns(io.BytesIO(data)))
        self._loaded[path] = found
        return found

    def _is_dir(self, path: str) -> bool:
        return path.endswith("/")

    def ignored(self, path: bytes, directory: bool) -> bool:
        shown = os.fsdecode(path) + ("/" if directory else "")
        return self.is_ignored(shown) is True

    def prunes(self, path: bytes) -> bool:
        return self.may_prune_directory(os.fsdecode(path) + "/")


@attrs.define
class WorkTreeScan:
    """What one walk found: changed tracked paths, and untracked files and nested
    repositories (``dir/``) with their modes."""

    changed: list[Change] = attrs.field(factory=list)
    untracked: list[tuple[bytes, int | None]] = attrs.field(factory=list)


class _Walk:
    def __init__(self, repo: Repository, abort: threading.Event | None) -> None:
        self.repo = repo
        self.abort = abort
        self.index = repo.index
        #: Index paths in index order, which is bytewise order: a directory holds
        #: tracked files when the first path at or after ``dir/`` starts with it.
        self.paths = list(repo.index.offsets)
        self.scan = WorkTreeScan()
        #: Index entries the walk has not met yet: what is left at the end is deleted.
        self.remaining = dict(repo.index.stat_keys(repo.index_mtime_ns, repo.file_mode))
        self.mode_bits = MODE_BITS if repo.file_mode else TYPE_BITS
        self.ignores = Ignores(repo)

    def run(self) -> WorkTreeScan:
        root = os.dup(self.repo.workspace.fileno())
        try:
            self._directory(root, b"")
        finally:
            os.close(root)
        for path in self.remaining:
            tracked = self.index.get(path)
            assert tracked is not None
            self.scan.changed.append(Change(path, tracked.mode, None, tracked.oid, None))
            if path.endswith(b".gitattributes") and (
                path == b".gitattributes" or path.endswith(b"/.gitattributes")
            ):
                data = self.repo.blob(tracked.oid, MAX_CONTROL_FILE_BYTES)
                raise_for_attributes(data, _shown(path))
        self.scan.changed.sort(key=lambda change: change.path)
        self.scan.untracked.sort()
        return self.scan

    def _entries(self, dir_fd: int, prefix: bytes) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(dir_fd) as listing:
                return list(listing)
        except OSError as exc:
            raise GitRepositoryError(f"cannot list {_shown(prefix) or '.'!r}: {exc}") from exc

    def _directory(self, dir_fd: int, prefix: bytes) -> None:
        check(self.abort)
        # The hot loop of status (profiled): locals, one dict pop per entry (it finds the
        # index entry and marks it seen), and Git's stat-cache test as one tuple compare
        # against the key the cached index keeps per entry.
        remaining = self.remaining
        mode_bits = self.mode_bits
        for count, entry in enumerate(self._entries(dir_fd, prefix)):
            if not count & _CHECK_MASK:
                check(self.abort)
            if entry.name == ".git":
                continue  # the repository itself (a nested one is found by its parent)
            name = entry.name.encode(_FS_ENCODING, "surrogateescape")  # os.fsencode, inlined
            path = prefix + name
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # gone since the listing: unseen, so reported deleted
            except OSError as exc:
                raise GitRepositoryError(f"cannot stat {_shown(path)!r}: {exc}") from exc
            if name == b".gitattributes" and stat.S_ISREG(info.st_mode):
                data = read_control(self.repo.workspace, path)
                if data is not None:
                    raise_for_attributes(data, _shown(path))
            key = remaining.pop(path, None)
            if key is not None:
                if key == (
                    info.st_mtime_ns,
                    info.st_ctime_ns,
                    info.st_size & _MASK,
                    info.st_ino & _MASK,
                    info.st_uid & _MASK,
                    info.st_gid & _MASK,
                    info.st_mode & mode_bits,
                ):
                    continue
                tracked = self.index.get(path)
                assert tracked is not None
                self._compare(dir_fd, entry.name, path, info, tracked)
                if stat.S_ISDIR(info.st_mode):
                    self._subdirectory(dir_fd, entry.name, path)
            elif stat.S_ISDIR(info.st_mode):
                self._subdirectory(dir_fd, entry.name, path)
            elif (
                stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)
            ) and not self.ignores.ignored(path, directory=False):
                self._untracked(path, work_mode(info.st_mode, None, True))

    def _untracked(self, path: bytes, mode: int | None) -> None:
        self.scan.untracked.append((path, mode))
        if len(self.scan.untracked) > MAX_GIT_ENTRIES:
            raise GitLimitExceeded("git untracked entries", MAX_GIT_ENTRIES)

    def _subdirectory(self, dir_fd: int, name: str, path: bytes) -> None:
        index = bisect.bisect_left(self.paths, path + b"/")
        tracked = index < len(self.paths) and self.paths[index].startswith(path + b"/")
        if not tracked and (
            path in self.repo.private
            or self.ignores.prunes(path)
            or self.ignores.ignored(path, True)
        ):
            return
        try:
            child = os.open(name, DIR_FLAGS, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                return  # replaced since the listing: what it held is unseen
            raise GitRepositoryError(f"cannot open {_shown(path)!r}: {exc}") from exc
        try:
            if not tracked and _exists(child, ".git"):
                self._untracked(path + b"/", None)  # a nested repository, as Git shows it
                return
            self._directory(child, path + b"/")
        finally:
            os.close(child)

    def _compare(
        self, dir_fd: int, name: str, path: bytes, info: os.stat_result, tracked: Tracked
    ) -> None:
        mode = work_mode(info.st_mode, tracked.mode, self.repo.file_mode)
        if mode is None:
            # A directory replaced the file: deleted. A FIFO, socket or device: Git calls
            # it modified (keeping the index mode) and cannot read it; so does the Host.
            new_mode = None if stat.S_ISDIR(info.st_mode) else tracked.mode
            self.scan.changed.append(Change(path, tracked.mode, new_mode, tracked.oid, None))
            return
        if mode == tracked.mode and stat_matches(tracked, info, self.repo.index_mtime_ns):
            return
        if mode == MODE_SYMLINK:
            target = _link_target(dir_fd, os.fsencode(name), path)
            oid = None if target is None else blob_id(target)
        elif info.st_size & _MASK != tracked.size and mode == tracked.mode:
            oid = None  # a different size is a different blob: no need to read it
        else:
            oid = hash_file(self.repo.workspace, dir_fd, name, path, self.abort)
        if oid == tracked.oid and mode == tracked.mode:
            return
        self.scan.changed.append(Change(path, tracked.mode, mode, tracked.oid, oid))


def scan_worktree(repo: Repository, abort: threading.Event | None) -> WorkTreeScan:
    """Walk the working tree once: tracked paths that differ from the index (deleted
    ones have ``new_mode`` None) and untracked, unignored files."""
    return _Walk(repo, abort).run()
