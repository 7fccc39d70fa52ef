"""list_files: direct children through the Host, exact bytes, exclusions, pages, errors."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path

import pytest
import trio
from jsonschema import Draft202012Validator

from emelex.contracts import (
    FILES_PAGE_TARGET_BYTES,
    MAX_FILES_PAGE,
    ContractError,
    FileEntry,
    FilesPage,
    ListFilesRequest,
    WorkspacePath,
    from_wire,
    schema_for,
    to_wire,
)
from emelex.service import (
    FileAccessDenied,
    InvalidWorkspacePath,
    UnknownSession,
    UnrepresentableName,
    WorkspacePathNotFound,
    WorkspaceUnavailable,
)
from emelex.service.workspace import _files_access
from emelex.service.workspace._files import NameCache, list_page
from emelex.service.workspace._files_access import exact_name, list_names, os_failure
from emelex.service.workspace._files_host import session_authority
from tests.service.files_support import files_session, list_all, names

BAD_NAME = b"caf\xe9-\xff.txt"  # Latin-1 bytes: not UTF-8


def populate(workspace: Path) -> None:
    (workspace / "b.txt").write_bytes(b"hello")
    (workspace / "a-dir").mkdir()
    (workspace / "a-dir" / "inner.md").write_text("# inner")
    (workspace / ".git").mkdir()
    (workspace / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (workspace / ".emelex").mkdir()
    os.symlink("/etc", workspace / "link-out")
    os.symlink("b.txt", workspace / "link-in")
    with open(os.path.join(os.fsencode(workspace), BAD_NAME), "wb") as handle:
        handle.write(b"\x00\x01")


async def test_the_root_lists_direct_children_with_exact_bytes(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        populate(files.workspace)
        page = await files.host.list_files(files.session_id)
        # .git, the workspace marker and the Host's own state directory are never listed.
        assert names(list(page.entries)) == sorted(
            [b"a-dir", b"b.txt", b"link-in", b"link-out", BAD_NAME]
        )
        kinds = {entry.path.raw: (entry.kind, entry.size) for entry in page.entries}
        assert kinds[b"b.txt"] == ("file", 5)
        assert kinds[b"a-dir"] == ("directory", None)
        assert kinds[b"link-out"] == ("symlink", None)  # a leaf: never followed
        assert kinds[BAD_NAME] == ("file", 2)
        assert page.next_after is None and page.path is None
        info = os.stat(files.workspace)
        assert page.directory_identity == f"{info.st_dev}:{info.st_ino}"
        entry = next(e for e in page.entries if e.path.raw == b"b.txt")
        mtime = os.stat(files.workspace / "b.txt").st_mtime_ns // 1_000_000
        assert entry.modified_ms == mtime


async def test_a_subdirectory_lists_full_relative_paths(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        populate(files.workspace)
        sub = files.workspace / "a-dir" / "deeper"
        sub.mkdir()
        (sub / "x").write_text("x")
        page = await files.host.list_files(files.session_id, WorkspacePath.of("a-dir"))
        assert [e.path.raw for e in page.entries] == [b"a-dir/deeper", b"a-dir/inner.md"]
        deeper = await files.host.list_files(files.session_id, WorkspacePath.of("a-dir/deeper"))
        assert [e.path.raw for e in deeper.entries] == [b"a-dir/deeper/x"]
        assert deeper.path == WorkspacePath.of(b"a-dir/deeper")


async def test_pages_hold_at_most_128_entries_and_resume_after_the_last(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        created = [f"f{index:04d}".encode() for index in range(300)]
        for name in created:
            (files.workspace / name.decode()).write_bytes(b"")
        pages, entries = await list_all(files.host, files.session_id)
        assert [len(p.entries) for p in pages] == [128, 128, 44]
        assert names(entries) == created  # bytewise order, no gap, no duplicate
        assert len({p.directory_identity for p in pages}) == 1
        # The cursor is exclusive and is just the last path of the page.
        assert pages[0].next_after == pages[0].entries[-1].path


async def test_the_soft_byte_target_shortens_pages_of_long_paths(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        deep = files.workspace
        parts = []
        for index in range(15):  # about 3,800 bytes of path
            part = f"{index:02d}" + "d" * 248
            parts.append(part)
            deep = deep / part
        deep.mkdir(parents=True)
        for index in range(200):
            (deep / f"{index:03d}").write_bytes(b"")
        path = WorkspacePath.of("/".join(parts))
        pages, entries = await list_all(files.host, files.session_id, path)
        assert len(entries) == 200
        assert max(len(p.entries) for p in pages) < MAX_FILES_PAGE
        for page in pages:
            encoded = len(json.dumps(to_wire(page)))
            # The target is soft (one entry may cross it), but a page stays close to it.
            assert encoded <= FILES_PAGE_TARGET_BYTES


async def test_one_complete_first_entry_always_advances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a target smaller than any entry, each page still carries one whole entry.
    monkeypatch.setattr("emelex.service.workspace._files.FILES_PAGE_TARGET_BYTES", 10)
    # The directory was just written: let its names be cached at once (see the racy test).
    monkeypatch.setattr("emelex.service.workspace._files.RACY_NS", -1)
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    for index in range(3):
        (tmp_path / f"n{index}").write_bytes(b"")
    cache = NameCache()
    after = None
    seen: list[FileEntry] = []
    while True:
        page = await trio.to_thread.run_sync(list_page, authority, cache, "s-1", None, after)
        seen.extend(page.entries)
        if page.next_after is None:
            break
        after = page.next_after
    assert [e.path.raw for e in seen] == [b"n0", b"n1", b"n2"]
    assert cache.scans == 1  # the sorted names were read once for the three pages


async def test_pages_are_wire_values_that_fit_the_schema(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        populate(files.workspace)
        page = await files.host.list_files(files.session_id)
        wire = json.loads(json.dumps(to_wire(page)))
        Draft202012Validator(schema_for("FilesPage")).validate(wire)
        assert from_wire(FilesPage, wire) == page
        bad = next(
            e for e in wire["entries"] if base64.b64decode(e["path"]["bytesBase64"]) == BAD_NAME
        )
        assert bad["path"] == {"bytesBase64": base64.b64encode(BAD_NAME).decode()}
        request = from_wire(
            ListFilesRequest,
            {"sessionId": files.session_id, "path": None, "after": wire["entries"][0]["path"]},
        )
        assert request.after == page.entries[0].path


@pytest.mark.parametrize(
    "raw",
    [b"/etc", b"a//b", b"a/../b", b"./a", b"a/", b"a\x00b", b"x" * 256, b"a/" * 2049],
)
def test_workspace_paths_are_normalized_relative_bytes(raw: bytes) -> None:
    with pytest.raises(ContractError):
        WorkspacePath.of(raw)


def test_workspace_paths_are_canonical_base64() -> None:
    assert WorkspacePath.of(b"a").bytes_base64 == "YQ=="
    for text in ("YR==", "YQ", "Y Q==", "YQ==\n"):
        with pytest.raises(ContractError):
            WorkspacePath(bytes_base64=text)


async def test_paths_that_cannot_be_listed_are_typed_errors(tmp_path: Path) -> None:
    async with files_session(tmp_path, hidden=("secret-*",)) as files:
        populate(files.workspace)
        (files.workspace / "secret-keys").mkdir()
        (files.workspace / "secret-keys" / "k").write_text("k")
        page = await files.host.list_files(files.session_id)
        assert b"secret-keys" not in names(list(page.entries))
        host, session = files.host, files.session_id
        cases: list[tuple[bytes, type[Exception]]] = [
            (b"link-out", InvalidWorkspacePath),  # a symlink is never followed
            (b"link-out/ssh", InvalidWorkspacePath),
            (b"b.txt", InvalidWorkspacePath),  # not a directory
            (b"b.txt/x", InvalidWorkspacePath),
            (b".git", InvalidWorkspacePath),
            (b".emelex", InvalidWorkspacePath),
            (b"host-state", InvalidWorkspacePath),  # the Host's private state
            (b"secret-keys", InvalidWorkspacePath),  # hidden by the agent's policy
            (b"missing", WorkspacePathNotFound),
            (b"a-dir/missing", WorkspacePathNotFound),
        ]
        for raw, error in cases:
            with pytest.raises(error):
                await host.list_files(session, WorkspacePath.of(raw))
        with pytest.raises(InvalidWorkspacePath, match="not a child"):
            await host.list_files(session, WorkspacePath.of("a-dir"), after=WorkspacePath.of("b"))
        with pytest.raises(UnknownSession):
            await host.list_files("s-nobody")


async def test_a_removed_workspace_is_unavailable(tmp_path: Path) -> None:
    workspace = tmp_path / "gone"
    workspace.mkdir()
    authority = session_authority(str(workspace), (), tmp_path / "host")
    shutil.rmtree(workspace)
    with pytest.raises(WorkspaceUnavailable):
        list_page(authority, NameCache(), "s-1", None, None)


async def test_the_host_state_is_hidden_wherever_it_lies(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        # A second name for the Host's state (a bind of the same inode is impossible
        # without root; a rename keeps the identity): identity, not name, decides.
        state = files.workspace / "host-state"
        page = await files.host.list_files(files.session_id)
        assert state.is_dir() and b"host-state" not in names(list(page.entries))


async def test_a_changed_directory_is_listed_fresh(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        for index in range(10):
            (files.workspace / f"old{index}").write_bytes(b"")
        await list_all(files.host, files.session_id)
        (files.workspace / "new").write_bytes(b"12")
        _, entries = await list_all(files.host, files.session_id)
        assert b"new" in names(entries) and len(entries) == 11
        (files.workspace / "old3").unlink()
        _, entries = await list_all(files.host, files.session_id)
        assert b"old3" not in names(entries) and len(entries) == 10


def test_names_the_platform_cannot_give_back_exactly_fail_explicitly() -> None:
    assert exact_name(os.fsdecode(BAD_NAME)) == BAD_NAME
    with pytest.raises(UnrepresentableName):
        exact_name("lone-\ud800-surrogate")  # not a surrogate-escaped byte


@pytest.mark.parametrize("by_proc", [True, False], ids=["proc", "descriptor"])
def test_names_are_listed_from_the_descriptor_as_exact_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, by_proc: bool
) -> None:
    # Both ways (through /proc/self/fd, or the descriptor itself when /proc is missing)
    # list the directory the descriptor holds, even after its path names another one.
    monkeypatch.setattr(_files_access, "_BY_PROC", by_proc and _files_access._BY_PROC)
    listed = tmp_path / "listed"
    listed.mkdir()
    for name in (BAD_NAME, b"plain", "caf\u00e9".encode()):
        open(os.path.join(os.fsencode(listed), name), "wb").close()
    fd = os.open(listed, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listed.rename(tmp_path / "moved")
        listed.mkdir()
        (listed / "impostor").write_bytes(b"")
        assert sorted(list_names(fd)) == sorted([BAD_NAME, b"plain", "caf\u00e9".encode()])
    finally:
        os.close(fd)


def test_a_directory_is_filtered_as_each_name_would_be(tmp_path: Path) -> None:
    names = [b".git", b".emelex", b"a.env", b"b.txt", BAD_NAME, b"keep", b"secrets", b"x.env.txt"]
    for hidden in ((), ("*.env",), ("/deep/keep", "secrets", "*.txt")):
        authority = session_authority(str(tmp_path), hidden, tmp_path / "none")
        for parts in ((b"deep",), (b"deep", b"er"), (BAD_NAME,)):
            one_by_one = [name for name in names if not authority.excluded((*parts, name))]
            assert authority.visible(parts, names) == one_by_one
    # The last policy: "*.txt" anywhere (the non-UTF-8 name too), "keep" only in /deep.
    assert authority.visible((b"deep",), names) == [b"a.env"]
    assert authority.visible((b"other",), names) == [b"a.env", b"keep"]


def test_os_errors_map_to_typed_failures() -> None:
    import errno

    assert isinstance(os_failure(OSError(errno.EACCES, "denied"), "x"), FileAccessDenied)
    assert isinstance(os_failure(OSError(errno.ENOENT, "gone"), "x"), WorkspacePathNotFound)


@pytest.mark.skipif(os.geteuid() == 0, reason="root bypasses permission bits")
async def test_a_directory_without_permission_is_access_denied(tmp_path: Path) -> None:
    async with files_session(tmp_path) as files:
        locked = files.workspace / "locked"
        locked.mkdir()
        locked.chmod(0)
        try:
            with pytest.raises(FileAccessDenied):
                await files.host.list_files(files.session_id, WorkspacePath.of("locked"))
        finally:
            locked.chmod(0o700)


def test_a_directory_written_within_the_racy_window_is_not_cached(tmp_path: Path) -> None:
    # Timestamps are coarse: a name added in the same tick as a cached scan would leave
    # the change and modification times as they were. Such scans are never kept.
    authority = session_authority(str(tmp_path), (), tmp_path / "none")
    cache = NameCache()
    (tmp_path / "one").write_bytes(b"")
    list_page(authority, cache, "s-1", None, None)
    list_page(authority, cache, "s-1", None, None)
    assert cache.scans == 2
