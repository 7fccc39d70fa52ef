"""Bounded reads: ``read_file`` and ``list_directory``.

Both are plain blocking functions (the tool layer runs them on a worker thread). Neither
trusts ``st_size``: ``/proc`` files report 0 and a file can grow while it is read, so every
read is bounded by the caller's byte limit, never by the size the file claims.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import stat
import threading
from collections.abc import Callable, Iterator

import attrs

from emelex._errors import LimitExceeded
from emelex.tools.workspace._errors import InvalidArgument, check_abort, map_os_error
from emelex.tools.workspace._root import Workspace, describe_mode
from emelex.tools.workspace._secrets import is_secret_child
from emelex.tools.workspace._sibling import is_sibling

DEFAULT_READ_BYTES = 256 * 1024
"""Default cap on the text one ``read_file`` call returns."""
MAX_READ_BYTES = 16 * 1024 * 1024
"""Hard ceiling for ``max_bytes`` in ``read_file``; larger values raise ``LimitExceeded``."""
HASH_LIMIT = 16 * 1024 * 1024
"""Files up to this size get a whole-content ``sha256`` in ``read_file`` results."""
BINARY_PROBE_BYTES = 8 * 1024
"""A NUL byte within this many leading bytes marks a file as binary."""
DEFAULT_LIST_ENTRIES = 1000
MAX_LIST_ENTRIES = 100_000
_CHUNK = 1024 * 1024
_SEEK_HOLES = True
"""Skip holes of sparse files while counting lines (they hold no newline). A test seam:
tests turn it off to prove a dense scan still stops when aborted."""


@attrs.frozen
class FileContent:
    """The result of :func:`read_file`.

    ``text`` is ``None`` when ``binary`` is true (a NUL byte near the start, or bytes that
    are not UTF-8). ``size`` is the size ``fstat`` reported when the file was opened.
    ``start_line``/``line_count`` describe the returned lines in line mode (``start_line`` is
    ``None`` in byte mode); ``byte_start``/``byte_end`` the returned byte range in byte mode
    (``None`` in line mode). ``truncated`` means the ``max_bytes`` bound cut the result;
    ``next_line``/``next_byte`` say where to continue when content remains (else ``None``).
    ``sha256`` is the hex digest of the whole file when it was read to its end and is at
    most :data:`HASH_LIMIT` bytes (what ``edit_file(expected_sha256=...)`` compares).
    """

    path: str
    text: str | None
    binary: bool
    size: int
    truncated: bool
    start_line: int | None = None
    line_count: int = 0
    next_line: int | None = None
    byte_start: int | None = None
    byte_end: int | None = None
    next_byte: int | None = None
    sha256: str | None = None


def _check_bound(name: str, value: int, maximum: int) -> None:
    if value < 1:
        raise InvalidArgument(name, f"must be at least 1, got {value}")
    if value > maximum:
        raise LimitExceeded(name, maximum, value)


def _trim_utf8_end(data: bytes) -> bytes:
    """Drop an incomplete UTF-8 sequence at the end of ``data`` (at most 3 bytes)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= need else data[:-back]
    return data


def _trim_utf8_start(data: bytes) -> int:
    """How many continuation bytes (at most 3) open ``data``."""
    skip = 0
    while skip < min(3, len(data)) and 0x80 <= data[skip] < 0xC0:
        skip += 1
    return skip


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _chunks(
    fd: int, shown: str, abort: threading.Event | None, skip_holes: Callable[[], bool]
) -> Iterator[bytes]:
    """The file in bounded chunks; checks ``abort`` before each one. While
    ``skip_holes()`` holds, holes of a sparse file are jumped over (``SEEK_DATA``)."""
    position = 0
    while True:
        check_abort(abort, shown)
        if position and _SEEK_HOLES and skip_holes():
            try:
                position = os.lseek(fd, position, os.SEEK_DATA)
            except OSError as error:
                if error.errno == errno.ENXIO:
                    return  # nothing but a hole up to the end
                if error.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                    raise
        chunk = os.pread(fd, _CHUNK, position)
        if not chunk:
            return
        position += len(chunk)
        yield chunk


def read_file(
    ws: Workspace,
    path: str,
    *,
    offset_line: int | None = None,
    limit_lines: int | None = None,
    byte_offset: int | None = None,
    byte_limit: int | None = None,
    max_bytes: int = DEFAULT_READ_BYTES,
    allow_outside: bool = False,
    allow_secret: bool = False,
    abort: threading.Event | None = None,
) -> FileContent:
    """Read a bounded part of a regular text file.

    Line mode (default): lines ``offset_line`` (1-based, default 1) onward, at most
    ``limit_lines`` of them and at most ``max_bytes`` bytes (a cut falls on a line end when
    one exists). Byte mode (``byte_offset`` given): bytes from ``byte_offset``, at most
    ``byte_limit`` and ``max_bytes``; partial UTF-8 sequences at both ends are trimmed.
    Likely-secret paths raise ``SecretPath`` unless ``allow_secret`` (after approval).
    Setting ``abort`` (from another thread) stops a long scan with ``OperationAborted``;
    holes of sparse files are skipped, not read.
    """
    _check_bound("max_bytes", max_bytes, MAX_READ_BYTES)
    byte_mode = byte_offset is not None or byte_limit is not None
    if byte_mode and (offset_line is not None or limit_lines is not None):
        raise InvalidArgument(path, "give either a line range or a byte range, not both")
    if offset_line is not None and offset_line < 1:
        raise InvalidArgument("offset_line", f"must be at least 1, got {offset_line}")
    if limit_lines is not None and limit_lines < 1:
        raise InvalidArgument("limit_lines", f"must be at least 1, got {limit_lines}")
    if byte_offset is not None and byte_offset < 0:
        raise InvalidArgument("byte_offset", f"must not be negative, got {byte_offset}")
    if byte_limit is not None and byte_limit < 1:
        raise InvalidArgument("byte_limit", f"must be at least 1, got {byte_limit}")

    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, allow_secret)
    fd, info = ws.open_file(target)
    try:
        if byte_mode:
            return _read_bytes(fd, info, target.display, byte_offset or 0, byte_limit, max_bytes)
        return _read_lines(
            fd, info, target.display, offset_line or 1, limit_lines, max_bytes, abort
        )
    except OSError as error:
        raise map_os_error(error, target.display) from error
    finally:
        os.close(fd)


def _read_bytes(
    fd: int,
    info: os.stat_result,
    shown: str,
    offset: int,
    limit: int | None,
    max_bytes: int,
) -> FileContent:
    probe = os.pread(fd, BINARY_PROBE_BYTES, 0)
    if b"\0" in probe:
        return FileContent(shown, None, True, info.st_size, False, byte_start=offset)
    wanted = max_bytes if limit is None else min(limit, max_bytes)
    data = os.pread(fd, wanted + 1, offset)
    more = len(data) > wanted
    truncated = more and (limit is None or limit > max_bytes)
    data = data[:wanted]
    skip = _trim_utf8_start(data)
    body = _trim_utf8_end(data[skip:])
    text = _decode(body)
    if text is None:
        return FileContent(shown, None, True, info.st_size, False, byte_start=offset)
    end = offset + skip + len(body)
    return FileContent(
        shown,
        text,
        False,
        info.st_size,
        truncated,
        byte_start=offset + skip,
        byte_end=end,
        next_byte=end if more or end < offset + len(data) else None,
    )


def _read_lines(
    fd: int,
    info: os.stat_result,
    shown: str,
    offset_line: int,
    limit_lines: int | None,
    max_bytes: int,
    abort: threading.Event | None,
) -> FileContent:
    hasher = hashlib.sha256() if info.st_size <= HASH_LIMIT else None
    hashed = 0
    line = 1  # number of the line that starts at the current position
    collecting = offset_line == 1
    out = bytearray()
    got_lines = 0
    done = False
    more = False  # content remains after what was collected
    first = True

    def skipping() -> bool:  # only lines before the offset are left, and no hash is due
        return not collecting and hasher is None

    for chunk in _chunks(fd, shown, abort, skipping):
        if first:
            first = False
            if b"\0" in chunk[:BINARY_PROBE_BYTES]:
                return FileContent(shown, None, True, info.st_size, False, start_line=offset_line)
        if hasher is not None:
            hashed += len(chunk)
            if hashed > HASH_LIMIT:
                hasher = None  # the file grew past the limit while being read
            else:
                hasher.update(chunk)
        if done:
            more = True
            if hasher is None:
                break
            continue
        start = 0
        if not collecting:
            need = offset_line - line
            count = chunk.count(b"\n")
            if count < need:
                line += count
                continue
            position = -1
            for _ in range(need):
                position = chunk.index(b"\n", position + 1)
            line = offset_line
            collecting = True
            start = position + 1
        if limit_lines is not None:
            remaining = limit_lines - got_lines
            segment_count = chunk.count(b"\n", start)
            if segment_count >= remaining:
                position = start - 1
                for _ in range(remaining):
                    position = chunk.index(b"\n", position + 1)
                out += chunk[start : position + 1]
                got_lines = limit_lines
                done = True
                more = position + 1 < len(chunk)
                if len(out) > max_bytes:
                    more = True
                if more and hasher is None:
                    break
                continue
            got_lines += segment_count
        out += chunk[start:]
        if len(out) > max_bytes:
            done = True
            more = True
            if hasher is None:
                break

    truncated = len(out) > max_bytes
    data = bytes(out)
    if truncated:
        data = data[:max_bytes]
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else _trim_utf8_end(data)
    text = _decode(data)
    digest = hasher.hexdigest() if hasher is not None else None
    if text is None:
        return FileContent(
            shown, None, True, info.st_size, False, start_line=offset_line, sha256=digest
        )
    if not collecting:  # the file has fewer lines than offset_line
        return FileContent(
            shown, "", False, info.st_size, False, start_line=offset_line, sha256=digest
        )
    complete = data.count(b"\n")
    line_count = complete + (1 if data and not data.endswith(b"\n") else 0)
    return FileContent(
        shown,
        text,
        False,
        info.st_size,
        truncated,
        start_line=offset_line,
        line_count=line_count,
        next_line=offset_line + complete if more else None,
        sha256=digest,
    )


@attrs.frozen
class DirEntry:
    """One entry of a listing. ``kind`` comes from ``lstat`` (links are not followed):
    ``file``, ``directory``, ``symlink``, ``fifo``, ``socket``, ``char_device``,
    ``block_device`` or ``other``. ``size`` is ``None`` for directories. ``secret`` marks
    names the secret list matches (their contents need approval to read).
    """

    name: str
    kind: str
    size: int | None
    secret: bool


@attrs.frozen
class DirectoryListing:
    """The result of :func:`list_directory`: entries sorted by name, at most the bound.

    ``total_entries`` counts every entry seen; ``truncated`` is true when some were left
    out because of ``max_entries``. Temporary and recovery siblings left by interrupted
    writes are not listed: ``leftovers`` counts them (``list_leftovers`` names them).
    """

    path: str
    entries: tuple[DirEntry, ...]
    total_entries: int
    truncated: bool
    leftovers: int = 0
    hidden: int = 0


def list_directory(
    ws: Workspace,
    path: str = ".",
    *,
    max_entries: int = DEFAULT_LIST_ENTRIES,
    allow_outside: bool = False,
    allow_secret: bool = False,
    abort: threading.Event | None = None,
) -> DirectoryListing:
    """List one directory, without following links, keeping the first entries by name.

    Memory stays bounded by ``max_entries`` however large the directory is; ``abort``
    is checked every 4096 entries.
    """
    _check_bound("max_entries", max_entries, MAX_LIST_ENTRIES)
    target = ws.target(path, allow_outside=allow_outside)
    ws.check_secret(target, allow_secret)
    fd = ws.open_dir(target)
    try:
        total = 0
        leftovers = 0
        hidden = 0

        def names() -> Iterator[str]:
            nonlocal total, leftovers, hidden
            with os.scandir(fd) as scan:
                for entry in scan:
                    if not total & 0xFFF:
                        check_abort(abort, target.display)
                    if is_sibling(entry.name):
                        leftovers += 1
                        continue
                    if ws.hidden and ws.hides_entry(target.child(entry.name)):
                        hidden += 1
                        continue
                    total += 1
                    yield entry.name

        try:
            kept = heapq.nsmallest(max_entries, names())
        except OSError as error:
            raise map_os_error(error, target.display) from error
        entries: list[DirEntry] = []
        inside_secret = target.secret_reason() is not None  # e.g. a root inside ~/.ssh
        for name in kept:
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed since it was listed
            except OSError as error:
                raise map_os_error(error, target.child(name).display) from error
            kind = describe_mode(info.st_mode)
            size = None if stat.S_ISDIR(info.st_mode) else info.st_size
            secret = inside_secret or is_secret_child(target.absolute_parts, name)
            entries.append(DirEntry(name, kind, size, secret))
    finally:
        os.close(fd)
    return DirectoryListing(
        target.display, tuple(entries), total, total > len(kept), leftovers, hidden
    )
