"""``watch_files``: tell a subscriber when a workspace directory needs rereading.

inotify is the wake-up: a watch on the directory's own descriptor (through
``/proc/self/fd``, so it follows the inode the walk reached, never a path) reports child
changes within milliseconds. Notifications can be lost (a full kernel queue, a change
inside the parent's rename), so the directory is also rescanned: the path is walked
again from the session's root (detecting deletion or replacement of the directory or
of the root) and a fingerprint of the visible entries' metadata is compared with the
last one. Rescans are paced to stay under a 10% duty cycle: the pause after a scan is
at least one second and at least twelve times the scan's duration (nine would be 10%
of the scan's own time, with nothing left for the thread hop and the comparison).

The stream is lazy: it observes only while its subscriber asks for the next update, so
pending notifications coalesce into one ``changed`` and nothing piles up for a slow
subscriber (the kernel's own queue overflowing is itself reported as ``changed``).
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, Callable
from typing import Final

import attrs
import trio

from emelex.contracts import (
    FilesChanged,
    FilesReady,
    FilesUnavailable,
    FilesWatchEnded,
    FilesWatchFailed,
    WatchFilesUpdate,
    WorkspacePath,
    trusted,
)
from emelex.service._errors import (
    FileReadError,
    InvalidWorkspacePath,
    ServiceError,
    UnrepresentableName,
    WorkspacePathNotFound,
    WorkspaceUnavailable,
)
from emelex.service.workspace._files_access import (
    CONTROL_NAMES,
    FileAuthority,
    Identity,
    exact_name,
    shown,
    split_parts,
    walk_directory,
)

try:  # Linux only; elsewhere the watch converges through rescans alone.
    from inotify_simple import INotify
    from inotify_simple import flags as _flags
except ImportError:  # pragma: no cover - non-Linux platforms
    INotify = None

_MASK: Final = (
    0
    if INotify is None
    else (
        _flags.CREATE
        | _flags.DELETE
        | _flags.MOVED_FROM
        | _flags.MOVED_TO
        | _flags.MODIFY
        | _flags.ATTRIB
        | _flags.CLOSE_WRITE
        | _flags.DELETE_SELF
        | _flags.MOVE_SELF
        | _flags.ONLYDIR
        | _flags.EXCL_UNLINK
    )
)
_SELF: Final = (
    0
    if INotify is None
    else _flags.DELETE_SELF | _flags.MOVE_SELF | _flags.IGNORED | _flags.UNMOUNT
)
_OVERFLOW: Final = 0 if INotify is None else _flags.Q_OVERFLOW
_MASK64: Final = (1 << 64) - 1


@attrs.frozen
class Pacing:
    """How rescans are paced: after a scan taking ``s`` seconds the watch waits
    ``max(min_pause, factor * s)``. ``close_poll`` bounds how long a closed Host goes
    unnoticed. ``on_scan(trio_time, seconds)`` observes each rescan (tests, benchmarks)."""

    min_pause: float = 1.0
    factor: float = 12.0
    close_poll: float = 0.5
    on_scan: Callable[[float, float], None] | None = attrs.field(default=None, eq=False)

    def pause(self, seconds: float) -> float:
        return max(self.min_pause, self.factor * seconds)


Fingerprint = tuple[int, int]


@attrs.define
class _Observed:
    """The watch's open resources (used by one task, one thread call at a time)."""

    authority: FileAuthority
    parts: tuple[bytes, ...]
    fd: int
    identity: Identity
    root_identity: Identity
    inotify: object | None
    fingerprint: Fingerprint
    seconds: float

    def close(self) -> None:
        if self.inotify is not None:
            self.inotify.close()  # type: ignore[attr-defined]
            self.inotify = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def fingerprint(
    authority: FileAuthority, fd: int, info: os.stat_result, parts: tuple[bytes, ...]
) -> Fingerprint:
    """The count and an order-independent hash of the visible entries' listed metadata
    (name, kind, and for files size, modification time and inode)."""
    private = {inode for device, inode in authority.private if device == info.st_dev}
    hidden = bool(authority.hidden)
    count = 0
    total = 0
    with os.scandir(fd) as scan:
        for entry in scan:
            raw = exact_name(entry.name)
            if raw in CONTROL_NAMES or (hidden and authority.excluded((*parts, raw))):
                continue
            try:
                child = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if entry.is_dir(follow_symlinks=False):
                if child.st_ino in private and authority.is_private(child):
                    continue
                item = hash((raw, 1, child.st_ino))
            elif entry.is_file(follow_symlinks=False):
                item = hash((raw, 0, child.st_ino, child.st_size, child.st_mtime_ns))
            else:
                item = hash((raw, child.st_mode >> 12, child.st_ino))
            total = (total + item) & _MASK64
            count += 1
    return count, total


def _start(authority: FileAuthority, parts: tuple[bytes, ...], notify: bool) -> _Observed:
    root, root_info = authority.open_root()
    try:
        fd = walk_directory(authority, root, parts)
    finally:
        os.close(root)
    observed = _Observed(
        authority,
        parts,
        fd,
        (0, 0),
        (root_info.st_dev, root_info.st_ino),
        None,
        (0, 0),
        0.0,
    )
    try:
        info = os.fstat(fd)
        observed.identity = (info.st_dev, info.st_ino)
        if notify and INotify is not None:
            # Watch before the first scan: a change during the scan still wakes us.
            inotify = INotify(nonblocking=True)
            observed.inotify = inotify
            inotify.add_watch(f"/proc/self/fd/{fd}", _MASK)
        started = time.perf_counter()
        observed.fingerprint = fingerprint(authority, fd, info, parts)
        observed.seconds = time.perf_counter() - started
        # An open descriptor would delay the kernel's deletion notice until it closes;
        # the inotify watch follows the inode, and rescans walk to it again anyway.
        os.close(fd)
        observed.fd = -1
    except ServiceError:
        observed.close()
        raise
    except OSError as exc:
        observed.close()
        raise FileReadError(f"cannot observe {shown(b'/'.join(parts))}: {exc.strerror}") from exc
    except BaseException:
        observed.close()
        raise
    return observed


Terminal = FilesUnavailable | FilesWatchFailed


def _rescan(observed: _Observed) -> Terminal | tuple[Fingerprint, float]:
    """Walk to the directory again and fingerprint it: a terminal update when the
    directory or the workspace authority is gone, else ``(fingerprint, seconds)``."""
    started = time.perf_counter()
    authority, parts = observed.authority, observed.parts
    try:
        root, root_info = authority.open_root()
    except WorkspaceUnavailable as exc:
        return FilesWatchFailed(code="authority", message=str(exc)[:4096])
    try:
        if (root_info.st_dev, root_info.st_ino) != observed.root_identity:
            return FilesWatchFailed(
                code="authority", message="the session's workspace was replaced"
            )
        try:
            fd = walk_directory(authority, root, parts)
        except WorkspacePathNotFound:
            return FilesUnavailable(reason="deleted")
        except UnrepresentableName as exc:
            return FilesWatchFailed(code="observation", message=str(exc)[:4096])
        except InvalidWorkspacePath:
            return FilesUnavailable(reason="replaced")
        except ServiceError as exc:
            return FilesWatchFailed(code="observation", message=str(exc)[:4096])
    finally:
        os.close(root)
    try:
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != observed.identity:
            return FilesUnavailable(reason="replaced")
        value = fingerprint(authority, fd, info, parts)
    except ServiceError as exc:
        return FilesWatchFailed(code="observation", message=str(exc)[:4096])
    except OSError as exc:
        return FilesWatchFailed(code="observation", message=f"cannot scan: {exc.strerror}")
    finally:
        os.close(fd)
    return value, time.perf_counter() - started


def _drain(observed: _Observed) -> tuple[bool, bool]:
    """Read pending notifications: ``(relevant change, event on the directory itself)``."""
    inotify = observed.inotify
    if inotify is None:
        return False, False
    relevant = itself = False
    for event in inotify.read(timeout=0):  # type: ignore[attr-defined]
        if event.mask & _SELF or not event.name:
            # The directory itself (its link count drops as it is removed, while this
            # watch still holds it open): walk to it again at once.
            itself = True
        if event.mask & _OVERFLOW:
            relevant = True
        elif event.name and not relevant:
            raw = exact_name(event.name)
            relevant = not observed.authority.excluded((*observed.parts, raw))
    return relevant, itself


def _terminal_after_rescan(
    outcome: Terminal | tuple[Fingerprint, float], root: bool
) -> WatchFilesUpdate | None:
    if isinstance(outcome, FilesUnavailable) and root:
        return FilesWatchFailed(code="authority", message="the session's workspace was removed")
    if isinstance(outcome, FilesUnavailable | FilesWatchFailed):
        return outcome
    return None


async def watch_stream(
    authority: FileAuthority,
    path: WorkspacePath | None,
    closed: Callable[[], bool],
    pacing: Pacing | None = None,
    *,
    notify: bool = True,
) -> AsyncGenerator[WatchFilesUpdate, None]:
    """The updates of one watch (see the module docstring). Problems found before
    ``ready`` raise typed errors; later ones end the stream with ``unavailable`` or
    ``error``. ``notify=False`` relies on rescans alone."""
    pace = Pacing() if pacing is None else pacing
    parts = split_parts(None if path is None else path.raw)
    observed = await trio.to_thread.run_sync(_start, authority, parts, notify)
    try:
        info_identity = f"{observed.identity[0]}:{observed.identity[1]}"
        yield trusted(FilesReady, kind="ready", directory_identity=info_identity)
        next_scan = trio.current_time() + pace.pause(observed.seconds)
        while True:
            if closed():
                yield FilesWatchEnded(reason="closed")
                return
            now = trio.current_time()
            if now >= next_scan:
                outcome = await trio.to_thread.run_sync(_rescan, observed)
                terminal = _terminal_after_rescan(outcome, not parts)
                if terminal is not None:
                    yield terminal
                    return
                assert isinstance(outcome, tuple)
                value, seconds = outcome
                if pace.on_scan is not None:
                    pace.on_scan(now, seconds)
                next_scan = trio.current_time() + pace.pause(seconds)
                if value != observed.fingerprint:
                    observed.fingerprint = value
                    yield FilesChanged()
                continue
            deadline = min(next_scan, now + pace.close_poll)
            if observed.inotify is None:
                await trio.sleep_until(deadline)
                continue
            with trio.move_on_at(deadline) as waited:
                await trio.lowlevel.wait_readable(observed.inotify.fileno())  # type: ignore[attr-defined]
            if waited.cancelled_caught:
                continue
            try:
                relevant, itself = _drain(observed)
            except UnrepresentableName as exc:
                yield FilesWatchFailed(code="observation", message=str(exc)[:4096])
                return
            except OSError as exc:
                yield FilesWatchFailed(code="observation", message=f"inotify: {exc.strerror}")
                return
            if itself:
                next_scan = trio.current_time()  # moved or deleted: find out at once
            if relevant:
                yield FilesChanged()
    finally:
        observed.close()


__all__ = ["Pacing", "fingerprint", "watch_stream"]
