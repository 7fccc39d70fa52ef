"""``read_file``: capture one regular file whole, then publish it in verified chunks.

The capture (a worker thread) opens the parent directory and the file without following
links, reads every byte into one private buffer, and publishes only when the file did
not change while it was read and the path still names that same file in that same
parent, reached again from the session's root. Every chunk of the subscription is a
slice of that one buffer, so a path replaced during delivery cannot mix two versions.
"""

from __future__ import annotations

import base64
import codecs
import errno
import hashlib
import itertools
import os
import stat
import threading
from collections.abc import AsyncGenerator
from typing import Final

import attrs
import trio

from emelex.contracts import (
    MAX_FILE_CHUNK_BYTES,
    MAX_READ_FILE_BYTES,
    FileContentKind,
    ReadFileAbsent,
    ReadFileBegin,
    ReadFileBinary,
    ReadFileChanged,
    ReadFileChunk,
    ReadFileEnd,
    ReadFileUnsupported,
    ReadFileUpdate,
    UnsupportedFileKind,
    WorkspacePath,
    trusted,
)
from emelex.service._errors import (
    FileTooLarge,
    InvalidWorkspacePath,
    WorkspacePathNotFound,
)
from emelex.service.workspace._files_access import (
    FILE_FLAGS,
    FileAuthority,
    os_failure,
    shown,
    split_parts,
    walk_directory,
)

#: Captures tried before a file that keeps changing is answered ``changed``.
CAPTURE_ATTEMPTS: Final = 3
#: Chunks encoded per worker-thread hop while publishing (4 MiB of original bytes): a
#: hop costs far more than encoding a chunk, and a batch stays a small part of the file.
CHUNKS_PER_BATCH: Final = 128
_VALIDATE_SLICE = 1 << 20
#: Files at least this large are hashed on a helper thread, beside the other checks.
PARALLEL_HASH_BYTES: Final = 4 << 20

#: Leading bytes of the image types a read returns as original bytes.
IMAGE_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)

Explicit = ReadFileAbsent | ReadFileChanged | ReadFileBinary | ReadFileUnsupported


@attrs.frozen
class Capture:
    """One complete, verified read: the buffer every chunk is sliced from."""

    path: WorkspacePath
    version: str
    data: bytes | bytearray = attrs.field(repr=False)  # never mutated once captured
    content: FileContentKind
    mime_type: str
    digest: str


class _Retry(Exception):
    """The file changed while it was captured."""


def image_type(data: bytes | bytearray) -> str | None:
    """The MIME type of a supported image, judged by its signature."""
    for signature, mime in IMAGE_SIGNATURES:
        if data.startswith(signature):
            return mime
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def is_text(data: bytes | bytearray) -> bool:
    """Complete UTF-8 without NUL (validated in slices: no full-size text copy)."""
    if b"\0" in data:
        return False
    if data.isascii():
        return True  # the usual case, checked a machine word at a time
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    view = memoryview(data)
    try:
        for start in range(0, len(data), _VALIDATE_SLICE):
            decoder.decode(view[start : start + _VALIDATE_SLICE])
        decoder.decode(b"", final=True)
    except UnicodeDecodeError:
        return False
    return True


def _unsupported(mode: int) -> UnsupportedFileKind:
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "charDevice"
    if stat.S_ISBLK(mode):
        return "blockDevice"
    return "other"


def version_of(digest: str, file: os.stat_result, parent: os.stat_result, raw: bytes) -> str:
    """The version binding content, physical file and parent identity, and pathname."""
    binder = hashlib.sha256(b"emelex-file-version-1\0")
    binder.update(digest.encode("ascii"))
    for number in (file.st_dev, file.st_ino, parent.st_dev, parent.st_ino):
        binder.update(b"\0%d" % number)
    binder.update(b"\0" + raw)
    return "v1:" + binder.hexdigest()


def _read_all(fd: int, size: int, limit: int) -> bytes | bytearray:
    """Every byte of ``fd`` from offset 0, into one buffer of exactly ``size`` bytes; a
    byte past the end means the file grew meanwhile."""
    # One read into a fresh buffer the kernel fills: no zeroing pass over it first.
    data: bytes | bytearray = os.pread(fd, size, 0)
    if len(data) < size:  # a short read (a shrunk file, or a read cut short): go on
        buffer = bytearray(data)
        buffer.extend(bytes(size - len(data)))
        view = memoryview(buffer)
        filled = len(data)
        try:
            while filled < size:
                count = os.preadv(fd, [view[filled:]], filled)
                if count == 0:
                    raise _Retry  # shrank meanwhile
                filled += count
        finally:
            view.release()
        data = buffer
    if os.pread(fd, 1, size):
        if size >= limit:
            raise FileTooLarge(limit, size + 1)
        raise _Retry
    return data


def _attempt(
    authority: FileAuthority, path: WorkspacePath, limit: int
) -> Capture | ReadFileAbsent | ReadFileBinary | ReadFileUnsupported:
    raw = path.raw
    parts = split_parts(raw)
    where = shown(raw)
    if authority.excluded(parts):
        raise InvalidWorkspacePath(f"{where} is never read (hidden or control path)")
    root, _info = authority.open_root()
    try:
        try:
            parent = walk_directory(authority, root, parts[:-1], listable=False)
        except WorkspacePathNotFound:
            return ReadFileAbsent()
    finally:
        os.close(root)
    try:
        name = parts[-1]
        try:
            before = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return ReadFileAbsent()
        except OSError as exc:
            raise os_failure(exc, where) from exc
        if not stat.S_ISREG(before.st_mode):
            return ReadFileUnsupported(file_kind=_unsupported(before.st_mode))
        if before.st_size > limit:
            raise FileTooLarge(limit, before.st_size)
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=parent)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENXIO):
                raise _Retry from exc  # replaced between the lstat and the open
            raise os_failure(exc, where) from exc
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (before.st_dev, before.st_ino):
                raise _Retry
            if not stat.S_ISREG(opened.st_mode):
                raise _Retry
            if opened.st_size > limit:
                raise FileTooLarge(limit, opened.st_size)
            try:
                data = _read_all(fd, opened.st_size, limit)
                after = os.fstat(fd)
            except OSError as exc:
                raise os_failure(exc, where) from exc
        finally:
            os.close(fd)
        stamp = (opened.st_size, opened.st_mtime_ns, opened.st_ctime_ns)
        if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) != stamp:
            raise _Retry
        parent_info = os.fstat(parent)
    finally:
        os.close(parent)
    # SHA-256 releases the GIL: hash on a helper thread while this one checks the path
    # again and classifies the content (the buffer is never written after the read).
    hasher = hashlib.sha256()
    helper = None
    if len(data) >= PARALLEL_HASH_BYTES:
        helper = threading.Thread(target=hasher.update, args=(data,), name="emelex-read-hash")
        helper.start()
    else:
        hasher.update(data)
    try:
        _check_still_there(authority, parts, parent_info, opened)
        mime = image_type(data)
        text = mime is None and is_text(data)
    finally:
        if helper is not None:
            helper.join()
    digest = hasher.hexdigest()
    version = version_of(digest, opened, parent_info, raw)
    if mime is not None:
        return Capture(path, version, data, "image", mime, digest)
    if not text:
        return ReadFileBinary(version=version, size=len(data))  # type: ignore[arg-type]
    return Capture(path, version, data, "text", "text/plain; charset=utf-8", digest)


def _check_still_there(
    authority: FileAuthority,
    parts: tuple[bytes, ...],
    parent: os.stat_result,
    file: os.stat_result,
) -> None:
    """Walk to the path again from a fresh root: the same parent must hold the same file
    (the workspace and permission checks run again with the walk)."""
    root, _info = authority.open_root()
    try:
        try:
            again = walk_directory(authority, root, parts[:-1], listable=False)
        except (WorkspacePathNotFound, InvalidWorkspacePath) as exc:
            raise _Retry from exc
    finally:
        os.close(root)
    try:
        here = os.fstat(again)
        try:
            now = os.stat(parts[-1], dir_fd=again, follow_symlinks=False)
        except OSError as exc:
            raise _Retry from exc
    finally:
        os.close(again)
    if (here.st_dev, here.st_ino) != (parent.st_dev, parent.st_ino):
        raise _Retry
    if (now.st_dev, now.st_ino) != (file.st_dev, file.st_ino):
        raise _Retry


def capture(
    authority: FileAuthority,
    path: WorkspacePath,
    expected_version: str | None = None,
    limit: int = MAX_READ_FILE_BYTES,
) -> Capture | Explicit:
    """Capture ``path`` (blocking; for a worker thread): a verified :class:`Capture` or an
    explicit result. Permission, invalid-path and I/O problems raise typed errors."""
    for _ in range(CAPTURE_ATTEMPTS):
        try:
            result = _attempt(authority, path, limit)
        except _Retry:
            continue
        break
    else:
        return ReadFileChanged(version=None)
    if expected_version is not None:
        current = getattr(result, "version", None)
        if current is not None and current != expected_version:
            return ReadFileChanged(version=current)
    return result


def chunk_spans(
    data: bytes | bytearray, text: bool, start: int = 0, count: int | None = None
) -> list[int]:
    """Chunk start offsets from ``start`` (at most ``count``), then the end offset: each
    chunk at most ``MAX_FILE_CHUNK_BYTES``; text chunks end at UTF-8 boundaries."""
    bounds = [start]
    size = len(data)
    offset = start
    while offset < size and (count is None or len(bounds) <= count):
        end = min(offset + MAX_FILE_CHUNK_BYTES, size)
        if text:
            while end < size and data[end] & 0xC0 == 0x80:
                end -= 1  # never split a character: at most three steps back
        bounds.append(end)
        offset = end
    return bounds


def encode_batch(captured: Capture, start: int) -> tuple[list[ReadFileChunk], int]:
    """Up to ``CHUNKS_PER_BATCH`` chunks from ``start``, sliced from the one buffer, and
    the offset after them."""
    bounds = chunk_spans(captured.data, captured.content == "text", start, CHUNKS_PER_BATCH)
    view = memoryview(captured.data)
    chunks = [
        trusted(
            ReadFileChunk,
            kind="chunk",
            offset=low,
            bytes_base64=base64.b64encode(view[low:high]).decode("ascii"),
        )
        for low, high in itertools.pairwise(bounds)
    ]
    view.release()
    return chunks, bounds[-1]


async def read_stream(
    authority: FileAuthority,
    path: WorkspacePath,
    expected_version: str | None = None,
    limit: int = MAX_READ_FILE_BYTES,
) -> AsyncGenerator[ReadFileUpdate, None]:
    """The updates of one read: an explicit result, or ``begin``, chunks and ``end``.
    Blocking work runs on worker threads (a cancelled read waits for its thread)."""
    result = await trio.to_thread.run_sync(capture, authority, path, expected_version, limit)
    if not isinstance(result, Capture):
        yield result
        return
    size = len(result.data)
    yield trusted(
        ReadFileBegin,
        kind="begin",
        path=path,
        version=result.version,
        size=size,
        content=result.content,
        mime_type=result.mime_type,
    )
    offset = 0
    while offset < size:
        batch, offset = await trio.to_thread.run_sync(encode_batch, result, offset)
        for chunk in batch:
            yield chunk
        del batch  # one batch alive at a time, not two across the next hop
    yield trusted(
        ReadFileEnd, kind="end", version=result.version, size=size, digest="sha256:" + result.digest
    )


__all__ = [
    "CAPTURE_ATTEMPTS",
    "IMAGE_SIGNATURES",
    "Capture",
    "capture",
    "chunk_spans",
    "encode_batch",
    "image_type",
    "is_text",
    "read_stream",
    "version_of",
]
