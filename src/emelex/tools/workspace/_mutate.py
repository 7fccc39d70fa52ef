"""Atomic, race-checked mutation: ``write_file`` and ``edit_file``.

Protocol (every name is relative to one parent directory descriptor, nothing re-resolved):

1. The new content goes to a fresh sibling ``.<name>.emelex-tmp-<id>`` created with
   ``O_CREAT | O_EXCL | O_NOFOLLOW``; the original mode (and owner, where permitted) is
   copied; the file is ``fsync``-ed.
2. A new file is installed with ``renameat2(RENAME_NOREPLACE)``; an existing one with
   ``renameat2(RENAME_EXCHANGE)``, which leaves the swapped-out inode under the temporary
   name instead of deleting it.
3. The swapped-out inode is checked: it must be the inode that was opened (and, for an
   edit, still hold the bytes that were read). If so it is unlinked and the directory is
   ``fsync``-ed. If not, a racer replaced the file: the exchange is undone, and if that
   cannot be done safely the racer's inode is kept under ``.<name>.emelex-recovered-<id>``.
   Either way :class:`ConcurrentModification` is raised and nothing is lost.

At every instant the target name holds a complete old or a complete new file. A crash
between steps can leave a temporary or recovery sibling behind, never a partial target.
A hard-linked target is replaced as a name: the other links keep the old inode untouched.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Callable

import attrs

from emelex._errors import LimitExceeded
from emelex.tools.workspace._errors import (
    AtomicRenameUnsupported,
    ConcurrentModification,
    EditMismatch,
    InvalidArgument,
    NotFound,
    NotTextFile,
    map_os_error,
)
from emelex.tools.workspace._leftovers import (
    claim_temporary,
    clean_stale_temporaries,
    release_temporary,
    remember_clean,
)
from emelex.tools.workspace._linux import RENAME_EXCHANGE, RENAME_NOREPLACE, renameat2
from emelex.tools.workspace._read import BINARY_PROBE_BYTES
from emelex.tools.workspace._root import Target, Workspace
from emelex.tools.workspace._sibling import RECOVERY_MARKER, TEMP_MARKER, sibling_name

MAX_WRITE_BYTES = 16 * 1024 * 1024
"""Ceiling on the content ``write_file`` accepts and on files ``edit_file`` rewrites."""


_HOOKS: dict[str, Callable[[int, str, str], None]] = {}
"""Test seam: ``_HOOKS[stage](parent_fd, name, temp_name)`` runs at ``"before_install"``
(temp file complete, nothing installed) and ``"after_exchange"`` (names swapped, not yet
verified). Tests use it to inject races deterministically; production never sets it."""


def _hook(stage: str, parent_fd: int, name: str, temp: str) -> None:
    hook = _HOOKS.get(stage)
    if hook is not None:
        hook(parent_fd, name, temp)


@attrs.frozen
class WriteResult:
    """The result of :func:`write_file`: ``created`` is false when a file was replaced."""

    path: str
    bytes_written: int
    created: bool
    sha256: str


@attrs.frozen
class EditResult:
    """The result of :func:`edit_file`: hashes of the content before and after."""

    path: str
    replacements: int
    bytes_written: int
    sha256_before: str
    sha256_after: str


@attrs.frozen
class _Prior:
    """What was opened before mutating: the inode to find again after the exchange."""

    fd: int
    device: int
    inode: int
    sha256: str | None  # content hash to re-check (edits only)


def _stat_id(parent_fd: int, name: str) -> tuple[int, int, int] | None:
    try:
        info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError:
        return None
    return info.st_dev, info.st_ino, info.st_mode


def _content_sha256(fd: int) -> str | None:
    hasher = hashlib.sha256()
    offset = 0
    while True:
        chunk = os.pread(fd, 1024 * 1024, offset)
        if not chunk:
            return hasher.hexdigest()
        offset += len(chunk)
        if offset > MAX_WRITE_BYTES:
            return None
        hasher.update(chunk)


def _unlink_quietly(parent_fd: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=parent_fd)


def _write_temp(
    parent_fd: int, name: str, data: bytes, mode: int, owner: tuple[int, int] | None
) -> tuple[str, int, int]:
    """Create, fill and sync the temporary sibling: ``(temp_name, st_dev, st_ino)``."""
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    for _attempt in range(8):
        temp = sibling_name(name, TEMP_MARKER)
        claim_temporary(parent_fd, temp)  # before it exists: a cleaner never sees it free
        try:
            fd = os.open(temp, flags, 0o600, dir_fd=parent_fd)
            break
        except FileExistsError:
            release_temporary(parent_fd, temp)
            continue
        except BaseException:
            release_temporary(parent_fd, temp)
            raise
    else:  # pragma: no cover - eight 48-bit collisions in a row
        raise FileExistsError(errno.EEXIST, "no free temporary name", name)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if owner is not None:
            # not permitted to give the file away: keep our ownership
            with contextlib.suppress(PermissionError):
                os.fchown(fd, owner[0], owner[1])
        os.fchmod(fd, mode)
        os.fsync(fd)
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(parent_fd, temp)
        release_temporary(parent_fd, temp)
        raise
    os.close(fd)
    return temp, info.st_dev, info.st_ino


def _install(
    parent_fd: int,
    name: str,
    parent: Target,
    data: bytes,
    mode: int,
    prior: _Prior | None,
    owner: tuple[int, int] | None,
) -> None:
    temp, new_dev, new_ino = _write_temp(parent_fd, name, data, mode, owner)
    try:
        _install_temp(parent_fd, name, parent, temp, prior, (new_dev, new_ino))
    finally:
        release_temporary(parent_fd, temp)


def _install_temp(
    parent_fd: int,
    name: str,
    parent: Target,
    temp: str,
    prior: _Prior | None,
    ours: tuple[int, int],
) -> None:
    shown = parent.child(name).display
    try:
        _hook("before_install", parent_fd, name, temp)
        if prior is None:
            renameat2(parent_fd, temp, parent_fd, name, RENAME_NOREPLACE)
        else:
            renameat2(parent_fd, temp, parent_fd, name, RENAME_EXCHANGE)
    except OSError as error:
        _unlink_quietly(parent_fd, temp)
        if error.errno == errno.EEXIST:
            raise ConcurrentModification(shown, "the file was created concurrently") from error
        if error.errno == errno.ENOENT and prior is not None:
            raise ConcurrentModification(shown, "the file was removed concurrently") from error
        if error.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            raise AtomicRenameUnsupported(
                shown, "this filesystem cannot rename atomically without replacing"
            ) from error
        raise map_os_error(error, shown) from error
    except BaseException:
        _unlink_quietly(parent_fd, temp)
        raise
    if prior is not None:
        _hook("after_exchange", parent_fd, name, temp)
        _settle_exchange(parent_fd, name, temp, parent, prior, ours)
    os.fsync(parent_fd)


def _settle_exchange(
    parent_fd: int,
    name: str,
    temp: str,
    parent: Target,
    prior: _Prior,
    ours: tuple[int, int],
) -> None:
    """After ``RENAME_EXCHANGE``: drop the old inode if it is the one read, else undo."""
    shown = parent.child(name).display
    swapped = _stat_id(parent_fd, temp)
    unchanged = swapped is not None and swapped[:2] == (prior.device, prior.inode)
    if unchanged and prior.sha256 is not None:
        unchanged = _content_sha256(prior.fd) == prior.sha256
    if unchanged:
        os.unlink(temp, dir_fd=parent_fd)
        return
    # A racer replaced (or rewrote) the file after it was read: put its version back.
    try:
        renameat2(parent_fd, temp, parent_fd, name, RENAME_EXCHANGE)
        back = _stat_id(parent_fd, temp)
        restored = back is not None and back[:2] == ours
    except OSError:
        restored = False
    if restored:
        os.unlink(temp, dir_fd=parent_fd)  # our unpublished content
        os.fsync(parent_fd)
        raise ConcurrentModification(
            shown, "the file was replaced concurrently; the change was not applied"
        )
    # Cannot tell what sits under the temporary name any more: keep it, never delete it.
    recovery = sibling_name(name, RECOVERY_MARKER)
    try:
        renameat2(parent_fd, temp, parent_fd, recovery, RENAME_NOREPLACE)
    except OSError:
        recovery = temp
    os.fsync(parent_fd)
    raise ConcurrentModification(
        shown,
        "the file was replaced concurrently and could not be restored",
        recovery_path=parent.child(recovery).display,
    )


def _as_bytes(content: str | bytes) -> bytes:
    if isinstance(content, str):
        return content.encode("utf-8")
    return bytes(content)


def write_file(
    ws: Workspace,
    path: str,
    content: str | bytes,
    *,
    create_parents: bool = False,
    max_bytes: int = MAX_WRITE_BYTES,
    allow_outside: bool = False,
    allow_secret: bool = False,
) -> WriteResult:
    """Create or atomically replace the regular file ``path`` with ``content``.

    A symlink, directory or special file at ``path`` is refused (links are never written
    through). A replaced file keeps its mode (and owner when permitted); a new one gets
    ``0o666`` less the umask. ``create_parents`` makes missing directories. Raises
    ``LimitExceeded`` above ``max_bytes`` (itself at most :data:`MAX_WRITE_BYTES`).
    """
    if max_bytes > MAX_WRITE_BYTES:
        raise LimitExceeded("max_bytes", MAX_WRITE_BYTES, max_bytes)
    data = _as_bytes(content)
    if len(data) > max_bytes:
        raise LimitExceeded("write_bytes", max_bytes, len(data))
    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, allow_secret)
    parent_fd, name = ws.open_parent(target, create=create_parents)
    parent = target.parts[:-1]
    try:
        clean_stale_temporaries(ws, parent_fd)
        try:
            fd, info = ws.open_file_at(parent_fd, name, target.display)
        except NotFound:
            fd = -1  # only a missing name means "create"; every other error propagates
        try:
            if fd < 0:
                umask = os.umask(0o022)
                os.umask(umask)
                prior = None
                mode = 0o666 & ~umask
                owner = None
            else:
                prior = _Prior(fd, info.st_dev, info.st_ino, None)
                mode = stat.S_IMODE(info.st_mode)
                owner = (info.st_uid, info.st_gid)
            try:
                _install(
                    parent_fd,
                    name,
                    target.with_parts(parent),
                    data,
                    mode,
                    prior,
                    owner,
                )
            except OSError as error:
                raise map_os_error(error, target.display) from error
            remember_clean(ws, parent_fd)
        finally:
            if fd >= 0:
                os.close(fd)
    finally:
        os.close(parent_fd)
    return WriteResult(target.display, len(data), prior is None, hashlib.sha256(data).hexdigest())


def edit_file(
    ws: Workspace,
    path: str,
    old: str,
    new: str,
    *,
    count: int = 1,
    expected_sha256: str | None = None,
    max_bytes: int = MAX_WRITE_BYTES,
    allow_outside: bool = False,
    allow_secret: bool = False,
) -> EditResult:
    """Replace exactly ``count`` occurrences of ``old`` with ``new`` in a UTF-8 text file.

    Raises :class:`EditMismatch` when ``old`` occurs a different number of times or the
    file's sha256 differs from ``expected_sha256`` (as reported by ``read_file``), and
    :class:`ConcurrentModification` when another writer replaced or rewrote the file while
    the edit was in flight (the other writer's version is kept; see the module docs).
    """
    if max_bytes > MAX_WRITE_BYTES:
        raise LimitExceeded("max_bytes", MAX_WRITE_BYTES, max_bytes)
    if count < 1:
        raise InvalidArgument(path, f"count must be at least 1, got {count}")
    if old == "":
        raise InvalidArgument(path, "the text to replace is empty")
    if old == new:
        raise InvalidArgument(path, "the old and new texts are identical")
    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, allow_secret)
    parent_fd, name = ws.open_parent(target)
    try:
        clean_stale_temporaries(ws, parent_fd)
        fd, info = ws.open_file_at(parent_fd, name, target.display)
        try:
            if info.st_size > max_bytes:
                raise LimitExceeded("edit_file_bytes", max_bytes, info.st_size)
            try:
                data = _read_bounded(fd, max_bytes)
            except OSError as error:
                raise map_os_error(error, target.display) from error
            if data is None:
                raise LimitExceeded("edit_file_bytes", max_bytes)
            before = hashlib.sha256(data).hexdigest()
            if expected_sha256 is not None and expected_sha256.lower() != before:
                raise EditMismatch(target.display, "sha256", expected_sha256.lower(), before)
            if b"\0" in data[:BINARY_PROBE_BYTES]:
                raise NotTextFile(target.display, "binary file (NUL bytes)")
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as error:
                raise NotTextFile(target.display, "not valid UTF-8") from error
            found = text.count(old)
            if found != count:
                raise EditMismatch(target.display, "count", count, found)
            # The size is known before anything is built: refuse without building it.
            size = edited_size(len(data), count, old, new)
            if size > max_bytes:
                raise LimitExceeded("edit_file_bytes", max_bytes, size)
            result = text.replace(old, new, count).encode("utf-8")
            prior = _Prior(fd, info.st_dev, info.st_ino, before)
            parent = target.with_parts(target.parts[:-1])
            owner = (info.st_uid, info.st_gid)
            try:
                _install(parent_fd, name, parent, result, stat.S_IMODE(info.st_mode), prior, owner)
            except OSError as error:
                raise map_os_error(error, target.display) from error
            remember_clean(ws, parent_fd)
        finally:
            os.close(fd)
    finally:
        os.close(parent_fd)
    return EditResult(
        target.display, count, len(result), before, hashlib.sha256(result).hexdigest()
    )


def edited_size(size: int, count: int, old: str, new: str) -> int:
    """The size in bytes of a ``size``-byte UTF-8 file after ``count`` occurrences of
    ``old`` are replaced by ``new``."""
    return size + count * (len(new.encode("utf-8")) - len(old.encode("utf-8")))


def _read_bounded(fd: int, limit: int) -> bytes | None:
    """Read the whole file through ``fd``; ``None`` when it holds more than ``limit``."""
    parts: list[bytes] = []
    total = 0
    while True:
        chunk = os.read(fd, min(1024 * 1024, limit + 1 - total))
        if not chunk:
            return b"".join(parts)
        total += len(chunk)
        if total > limit:
            return None
        parts.append(chunk)
