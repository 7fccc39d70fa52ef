"""read_file: verified chunks of one captured buffer, explicit results, typed failures,
and the client-side assembler that refuses anything incomplete or inconsistent."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import stat
from pathlib import Path

import pytest
import trio
from jsonschema import Draft202012Validator

from emelex.contracts import (
    MAX_FILE_CHUNK_BYTES,
    MAX_READ_FILE_BYTES,
    Digest,
    FileVersion,
    ReadFileAbsent,
    ReadFileBegin,
    ReadFileBinary,
    ReadFileChanged,
    ReadFileChunk,
    ReadFileEnd,
    ReadFileUnsupported,
    ReadFileUpdate,
    WorkspacePath,
    from_wire,
    schema_for,
    to_wire,
)
from emelex.service import (
    FileAssembler,
    FileReadCorrupt,
    FileReadIncomplete,
    FileSnapshot,
    FileTooLarge,
    InvalidWorkspacePath,
    UnknownSession,
    assemble_file,
)
from emelex.service.workspace._files_host import session_authority
from emelex.service.workspace._read_file import _read_all, _Retry, capture, read_stream
from tests.service.files_support import FilesSession, files_session

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + bytes(range(256)) * 4
UPDATES = Draft202012Validator(schema_for("ReadFileUpdate"))


async def read_updates(
    files: FilesSession, raw: bytes, expected: str | None = None
) -> list[ReadFileUpdate]:
    with trio.fail_after(20):
        async with files.host.read_file(
            files.session_id, WorkspacePath.of(raw), expected_version=expected
        ) as updates:
            return [update async for update in updates]


async def read(files: FilesSession, raw: bytes, expected: str | None = None) -> object:
    updates = await read_updates(files, raw, expected)
    for update in updates:
        wire = json.loads(json.dumps(to_wire(update)))
        UPDATES.validate(wire)
        assert from_wire(ReadFileUpdate, wire) == update
    assembler = FileAssembler()
    for update in updates:
        assembler.feed(update)
    return assembler.result()


async def test_text_arrives_in_chunks_that_end_at_character_boundaries(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        text = "é€😀a" * 30_000  # 300,000 bytes of 1- to 4-byte characters
        data = text.encode()
        (files.workspace / "t.txt").write_bytes(data)
        updates = await read_updates(files, b"t.txt")
        begin, chunks, end = updates[0], updates[1:-1], updates[-1]
        assert isinstance(begin, ReadFileBegin) and isinstance(end, ReadFileEnd)
        assert (begin.content, begin.mime_type, begin.size) == (
            "text",
            "text/plain; charset=utf-8",
            len(data),
        )
        offset = 0
        for chunk in chunks:
            assert isinstance(chunk, ReadFileChunk) and chunk.offset == offset
            piece = base64.b64decode(chunk.bytes_base64)
            assert 0 < len(piece) <= MAX_FILE_CHUNK_BYTES
            piece.decode("utf-8")  # each chunk is whole characters
            offset += len(piece)
        assert offset == len(data) == end.size
        assert end.digest == "sha256:" + hashlib.sha256(data).hexdigest()
        assert end.version == begin.version
        snapshot = await read(files, b"t.txt")
        assert isinstance(snapshot, FileSnapshot) and snapshot.text == text


async def test_an_empty_file_is_valid_text(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "empty").write_bytes(b"")
        updates = await read_updates(files, b"empty")
        assert [u.kind for u in updates] == ["begin", "end"]
        snapshot = await read(files, b"empty")
        assert isinstance(snapshot, FileSnapshot)
        assert (snapshot.content, snapshot.text, snapshot.data) == ("text", "", b"")


@pytest.mark.parametrize(
    ("data", "mime"),
    [
        (PNG, "image/png"),
        (b"\xff\xd8\xff\xe0" + bytes(300), "image/jpeg"),
        (b"GIF89a" + bytes(50), "image/gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 " + bytes(40), "image/webp"),
    ],
)
async def test_supported_images_are_original_bytes(tmp_path: Path, data: bytes, mime: str) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "img").write_bytes(data)
        snapshot = await read(files, b"img")
        assert isinstance(snapshot, FileSnapshot)
        assert (snapshot.content, snapshot.mime_type, snapshot.data) == ("image", mime, data)
        with pytest.raises(ValueError, match="not text"):
            _ = snapshot.text


@pytest.mark.parametrize("data", [b"\xff\xfe\x00", b"text\x00with nul", b"caf\xe9", b"\xe2\x82"])
async def test_other_content_is_binary(tmp_path: Path, data: bytes) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "bin").write_bytes(data)
        result = await read(files, b"bin")
        assert isinstance(result, ReadFileBinary) and result.size == len(data)


async def test_absent_and_unsupported_kinds_are_explicit(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "dir").mkdir()
        os.symlink("/dev/null", ws / "null-link")
        os.symlink("/etc/passwd", ws / "passwd-link")
        os.mkfifo(ws / "fifo")  # opening it for reading would block: never opened
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(str(ws / "sock"))
        try:
            expected = {
                b"missing": ReadFileAbsent(),
                b"dir/missing": ReadFileAbsent(),
                b"missing-dir/x": ReadFileAbsent(),
                b"dir": ReadFileUnsupported(file_kind="directory"),
                b"null-link": ReadFileUnsupported(file_kind="symlink"),
                b"passwd-link": ReadFileUnsupported(file_kind="symlink"),
                b"fifo": ReadFileUnsupported(file_kind="fifo"),
                b"sock": ReadFileUnsupported(file_kind="socket"),
            }
            for raw, result in expected.items():
                assert await read(files, raw) == result, raw
        finally:
            listener.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device needs root")
async def test_a_device_node_is_unsupported_and_never_opened(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        os.mknod(files.workspace / "zero", stat.S_IFCHR | 0o600, os.makedev(1, 5))
        assert await read(files, b"zero") == ReadFileUnsupported(file_kind="charDevice")


async def test_expected_version_is_a_reread_precondition(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "f").write_text("one")
        first = await read(files, b"f")
        assert isinstance(first, FileSnapshot)
        again = await read(files, b"f", first.version)
        assert isinstance(again, FileSnapshot) and again.version == first.version
        (files.workspace / "f").write_text("two")
        changed = await read(files, b"f", first.version)
        assert isinstance(changed, ReadFileChanged) and changed.version is not None
        fresh = await read(files, b"f", changed.version)
        assert isinstance(fresh, FileSnapshot) and fresh.text == "two"


async def test_a_version_never_grants_access(tmp_path: Path) -> None:
    async with files_session(tmp_path, hidden=("private.txt",)) as files:
        (files.workspace / "private.txt").write_text("secret")
        (files.workspace / ".git").mkdir()
        (files.workspace / ".git" / "config").write_text("[core]")
        version = "v1:" + "0" * 64
        for raw in (b"private.txt", b".git/config", b"host-state/host.db"):
            with pytest.raises(InvalidWorkspacePath):
                await read(files, raw, version)


async def test_the_version_binds_the_pathname_and_the_physical_file(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "a").write_text("same")
        os.link(ws / "a", ws / "hard")  # same inode, same parent, other name
        (ws / "sub").mkdir()
        (ws / "sub" / "a").write_text("same")  # same name and bytes, other file
        versions = set()
        for raw in (b"a", b"hard", b"sub/a"):
            snapshot = await read(files, raw)
            assert isinstance(snapshot, FileSnapshot) and snapshot.text == "same"
            versions.add(snapshot.version)
        assert len(versions) == 3


async def test_bad_paths_are_failures(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        ws = files.workspace
        (ws / "file").write_text("x")
        (ws / "real").mkdir()
        (ws / "real" / "inner").write_text("inner")
        os.symlink("real", ws / "via-link")
        for raw in (b"via-link/inner", b"file/x", b".emelex/anything"):
            with pytest.raises(InvalidWorkspacePath):
                await read(files, raw)
        with pytest.raises(UnknownSession):
            async with files.host.read_file("s-nobody", WorkspacePath.of("file")):
                pass


async def test_the_file_size_is_bounded(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "huge").touch()
        os.truncate(files.workspace / "huge", MAX_READ_FILE_BYTES + 1)  # sparse: no disk use
        with pytest.raises(FileTooLarge) as caught:
            await read(files, b"huge")
        assert caught.value.maximum == MAX_READ_FILE_BYTES
    authority = session_authority(str(tmp_path / "ws"), (), tmp_path / "none")
    (tmp_path / "ws" / "small").write_bytes(b"x" * 11)
    with pytest.raises(FileTooLarge):
        capture(authority, WorkspacePath.of("small"), limit=10)


async def test_closing_early_stops_the_read(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        (files.workspace / "big").write_bytes(b"a" * (4 * MAX_FILE_CHUNK_BYTES))
        seen = []
        async with files.host.read_file(files.session_id, WorkspacePath.of("big")) as updates:
            async for update in updates:
                seen.append(update)
                if len(seen) == 2:
                    break
        assembler = FileAssembler()
        for update in seen:
            assembler.feed(update)
        with pytest.raises(FileReadIncomplete, match="after 32768 of 131072"):
            assembler.result()


def _stream(data: bytes, text: str = "v1:" + "a" * 64) -> list[ReadFileUpdate]:
    version = FileVersion(text)
    path = WorkspacePath.of("f")
    begin = ReadFileBegin(
        path=path, version=version, size=len(data), content="text", mime_type="text/plain"
    )
    chunks: list[ReadFileUpdate] = [
        ReadFileChunk(offset=at, bytes_base64=base64.b64encode(data[at : at + 4]).decode())
        for at in range(0, len(data), 4)
    ]
    end = ReadFileEnd(
        version=version, size=len(data), digest=Digest("sha256:" + hashlib.sha256(data).hexdigest())
    )
    return [begin, *chunks, end]


def _feed_all(updates: list[ReadFileUpdate]) -> object:
    assembler = FileAssembler()
    for update in updates:
        assembler.feed(update)
    return assembler.result()


def test_the_assembler_accepts_only_verified_complete_streams() -> None:
    good = _stream(b"0123456789")
    snapshot = _feed_all(good)
    assert isinstance(snapshot, FileSnapshot) and snapshot.data == b"0123456789"
    with pytest.raises(FileReadIncomplete):
        _feed_all(good[:-1])  # no end
    with pytest.raises(FileReadIncomplete):
        _feed_all([])
    with pytest.raises(FileReadCorrupt, match="expected"):
        _feed_all([good[0], good[2], *good[3:]])  # a gap
    with pytest.raises(FileReadCorrupt, match="expected"):
        _feed_all([good[0], good[1], good[1], *good[2:]])  # a repeat
    other = _stream(b"0123456788")
    with pytest.raises(FileReadCorrupt, match="digest"):
        _feed_all([*good[:-1], other[-1]])
    mixed = _stream(b"0123456789", "v1:" + "b" * 64)
    with pytest.raises(FileReadCorrupt, match="version"):
        _feed_all([*good[:-1], mixed[-1]])
    with pytest.raises(FileReadCorrupt, match="after the read ended"):
        _feed_all([*good, good[1]])
    with pytest.raises(FileReadCorrupt, match="before 'begin'"):
        _feed_all(good[1:])
    with pytest.raises(FileReadCorrupt, match="explicit"):
        _feed_all([good[0], ReadFileAbsent()])
    short = _stream(b"012345678")
    with pytest.raises(FileReadCorrupt):
        _feed_all([good[0], *short[1:]])  # fewer bytes than announced


async def test_the_stream_helper_reads_a_workspace_file_directly(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("direct")
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    result = await assemble_file(read_stream(authority, WorkspacePath.of("x")))
    assert isinstance(result, FileSnapshot) and result.text == "direct"


def test_the_capture_reads_exactly_the_size_it_saw(tmp_path: Path) -> None:
    data = bytes(range(256)) * 1000
    (tmp_path / "f").write_bytes(data)
    fd = os.open(tmp_path / "f", os.O_RDONLY)
    try:
        assert _read_all(fd, len(data), 1 << 20) == data
        with pytest.raises(_Retry):  # fewer bytes than the size seen: it shrank meanwhile
            _read_all(fd, len(data) + 7, 1 << 20)
        with pytest.raises(_Retry):  # a byte past the size seen: it grew meanwhile
            _read_all(fd, len(data) - 1, 1 << 20)
        with pytest.raises(FileTooLarge):  # grew past the limit
            _read_all(fd, len(data) - 1, len(data) - 1)
    finally:
        os.close(fd)
