"""The client side of ``read_file``: reassemble the updates and verify them before use.

Nothing is accepted until the ``end`` item arrived and every check passed: contiguous
offsets from 0, chunk sizes within the wire bound, the size, version and SHA-256 digest
announced by ``begin`` and ``end`` matching the bytes received. A stream that stops
before ``end`` is incomplete, never a shorter file.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import AsyncIterable

import attrs

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
    WorkspacePath,
)
from emelex.service._errors import FileReadCorrupt, FileReadIncomplete

ReadOutcome = ReadFileAbsent | ReadFileChanged | ReadFileBinary | ReadFileUnsupported


@attrs.frozen
class FileSnapshot:
    """The verified content of one read: ``data`` holds the original bytes."""

    path: WorkspacePath
    version: str
    content: FileContentKind
    mime_type: str
    data: bytes = attrs.field(repr=False)
    digest: str

    @property
    def text(self) -> str:
        """The content as text (only for ``content == "text"``)."""
        if self.content != "text":
            raise ValueError(f"the file is {self.mime_type}, not text")
        return self.data.decode("utf-8")


class FileAssembler:
    """Feed each update of one ``read_file`` subscription in order; then :meth:`result`.

    Raises :class:`FileReadCorrupt` as soon as an update does not verify and
    :class:`FileReadIncomplete` from :meth:`result` when ``end`` never came.
    ``max_bytes`` bounds what a ``begin`` may announce (the buffer is sized from it).
    """

    def __init__(self, max_bytes: int = MAX_READ_FILE_BYTES) -> None:
        self._max_bytes = max_bytes
        self._begin: ReadFileBegin | None = None
        self._outcome: ReadOutcome | None = None
        self._parts: list[bytes] = []
        self._received = 0
        self._hash = hashlib.sha256()
        self._done: FileSnapshot | None = None

    def feed(self, update: ReadFileUpdate) -> None:
        if self._done is not None or self._outcome is not None:
            raise FileReadCorrupt(f"a {update.kind!r} update after the read ended")
        if isinstance(update, ReadFileBegin):
            if self._begin is not None:
                raise FileReadCorrupt("a second 'begin'")
            if update.size > self._max_bytes:
                raise FileReadCorrupt(f"'begin' announces {update.size} bytes")
            self._begin = update
            return
        if isinstance(update, ReadFileChunk | ReadFileEnd) and self._begin is None:
            raise FileReadCorrupt(f"a {update.kind!r} update before 'begin'")
        if isinstance(update, ReadFileChunk):
            self._chunk(update)
        elif isinstance(update, ReadFileEnd):
            self._end(update)
        elif self._begin is not None:
            raise FileReadCorrupt(f"an explicit {update.kind!r} result inside a capture")
        else:
            self._outcome = update

    def _chunk(self, chunk: ReadFileChunk) -> None:
        assert self._begin is not None
        if chunk.offset != self._received:
            raise FileReadCorrupt(f"chunk at {chunk.offset}, expected {self._received}")
        try:
            data = base64.b64decode(chunk.bytes_base64, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise FileReadCorrupt("a chunk is not Base64") from exc
        if not 0 < len(data) <= MAX_FILE_CHUNK_BYTES:
            raise FileReadCorrupt(f"a chunk of {len(data)} bytes")
        if self._received + len(data) > self._begin.size:
            raise FileReadCorrupt("chunks exceed the announced size")
        self._parts.append(data)
        self._hash.update(data)
        self._received += len(data)

    def _end(self, end: ReadFileEnd) -> None:
        begin = self._begin
        assert begin is not None
        if end.version != begin.version:
            raise FileReadCorrupt("'end' names another version than 'begin'")
        if end.size != begin.size or self._received != begin.size:
            raise FileReadCorrupt(
                f"received {self._received} bytes; begin says {begin.size}, end {end.size}"
            )
        digest = "sha256:" + self._hash.hexdigest()
        if end.digest != digest:
            raise FileReadCorrupt("the SHA-256 digest does not match the bytes received")
        data = b"".join(self._parts)
        self._parts = []
        if begin.content == "text":
            try:
                data.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise FileReadCorrupt("text content is not UTF-8") from exc
        self._done = FileSnapshot(
            path=begin.path,
            version=begin.version,
            content=begin.content,
            mime_type=begin.mime_type,
            data=data,
            digest=digest,
        )

    def result(self) -> FileSnapshot | ReadOutcome:
        """The verified snapshot, or the explicit outcome (absent, changed, binary,
        unsupported); raises :class:`FileReadIncomplete` before ``end``."""
        if self._done is not None:
            return self._done
        if self._outcome is not None:
            return self._outcome
        if self._begin is None:
            raise FileReadIncomplete("the read delivered no update")
        raise FileReadIncomplete(
            f"the read stopped after {self._received} of {self._begin.size} bytes"
        )


async def assemble_file(updates: AsyncIterable[ReadFileUpdate]) -> FileSnapshot | ReadOutcome:
    """Drain a ``read_file`` subscription and return its verified result."""
    assembler = FileAssembler()
    async for update in updates:
        assembler.feed(update)
    return assembler.result()


__all__ = [
    "FileAssembler",
    "FileSnapshot",
    "ReadOutcome",
    "assemble_file",
]
