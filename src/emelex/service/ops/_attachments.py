"""Executor attachments: one binary resource cut into files by ordered metadata.

The resource holds the files' original bytes back to back; each file's offset follows
from the lengths before it. Every file's size and SHA-256 digest are checked against its
metadata while the resource is read, in bounded chunks, and nothing but the resource's
bytes ever becomes a file: metadata alone grants no access.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncGenerator, AsyncIterable, AsyncIterator, Sequence
from typing import Any, Final

import trio

from emelex.contracts import MAX_ATTACHMENT_BYTES, AttachmentMeta
from emelex.service._errors import AttachmentError

#: Bytes read from the resource at a time.
CHUNK: Final = 64 * 1024


async def _chunks(resource: bytes | AsyncIterable[bytes]) -> AsyncGenerator[bytes, None]:
    if isinstance(resource, bytes | bytearray | memoryview):
        data = bytes(resource)
        for start in range(0, len(data), CHUNK):
            yield data[start : start + CHUNK]
            await trio.lowlevel.checkpoint()
        return
    # Typed as object: the caller's values are checked, whatever it declared.
    iterator: AsyncIterator[object] = aiter(resource)
    try:
        async for chunk in iterator:
            if not isinstance(chunk, bytes | bytearray | memoryview):
                name = type(chunk).__name__
                raise AttachmentError(f"the attachments resource yielded {name}")
            yield bytes(chunk)
    finally:
        # Refused part way, the caller's generator is closed here, not left to the GC.
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()


def check_metadata(metadata: Sequence[AttachmentMeta], limit: int) -> int:
    """The resource's total size; raises :class:`AttachmentError` for duplicate names or
    a total above ``limit`` (and never above the wire's bound)."""
    names = [meta.name for meta in metadata]
    if len(set(names)) != len(names):
        raise AttachmentError("two attachments share a name")
    total = sum(meta.bytes for meta in metadata)
    bound = min(limit, MAX_ATTACHMENT_BYTES)
    if total > bound:
        raise AttachmentError(f"the attachments hold {total} bytes; the Host takes {bound}")
    return total


async def extract(
    resource: bytes | AsyncIterable[bytes] | None,
    metadata: Sequence[AttachmentMeta],
    directory: str,
    *,
    limit: int,
) -> None:
    """Write each attached file into ``directory`` (new files, mode 0444) from the
    resource, checking sizes and digests. On any mismatch the files written so far are
    removed and :class:`AttachmentError` is raised. Checkpoints between chunks; when
    cancelled, the partial files are removed too."""
    total = check_metadata(metadata, limit)
    if resource is None:
        if total:
            raise AttachmentError("metadata names attachments but no resource came with it")
        return
    written: list[str] = []
    current: tuple[AttachmentMeta, int, Any, int] | None = None
    try:
        pending = list(metadata)
        received = 0
        async with contextlib.aclosing(_chunks(resource)) as chunks:
            async for chunk in chunks:
                view = memoryview(chunk)
                while view:
                    if current is None:
                        if not pending:
                            raise AttachmentError(
                                f"the resource holds more than the {total} bytes described"
                            )
                        meta = pending.pop(0)
                        path = os.path.join(directory, meta.name)
                        fd = await trio.to_thread.run_sync(_create, path)
                        written.append(path)
                        current = (meta, fd, hashlib.sha256(), 0)
                    meta, fd, digest, done = current
                    take = view[: meta.bytes - done]
                    if take:
                        await trio.to_thread.run_sync(_write_all, fd, bytes(take))
                        digest.update(take)
                        done += len(take)
                        received += len(take)
                        view = view[len(take) :]
                    current = (meta, fd, digest, done)
                    if done == meta.bytes:
                        current = None
                        os.close(fd)
                        if "sha256:" + digest.hexdigest() != meta.digest:
                            raise AttachmentError(
                                f"attachment {meta.name!r} does not match its digest"
                            )
        # Files of zero bytes take no resource bytes at all.
        while current is None and pending and pending[0].bytes == 0:
            meta = pending.pop(0)
            path = os.path.join(directory, meta.name)
            os.close(await trio.to_thread.run_sync(_create, path))
            written.append(path)
            if "sha256:" + hashlib.sha256().hexdigest() != meta.digest:
                raise AttachmentError(f"attachment {meta.name!r} does not match its digest")
        if current is not None or pending:
            raise AttachmentError(
                f"the resource ended after {received} of the {total} bytes described"
            )
    except BaseException:
        if current is not None:
            os.close(current[1])
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(_remove_all, written)
        raise


def _create(path: str) -> int:
    # A new regular file, never through a link; read-only once closed (mode 0444).
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _remove_all(paths: list[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
