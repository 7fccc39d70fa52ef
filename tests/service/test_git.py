"""git_status and git_diff against repositories made by the real git binary.

Every status is compared with ``git status --porcelain=v2 -z`` (the oracle). The Host's
status runs first each time: git refreshes the index as it goes, and the Host must get
the same answer from a stale stat cache (hashing) as from a fresh one.
"""

from __future__ import annotations

import base64
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emelex.app import Agent
from emelex.contracts import (
    MAX_GIT_DIFF_INPUT_BYTES,
    GitBinaryDiff,
    GitStatus,
    GitTextDiff,
    GitUnchangedDiff,
    GitUnsupportedDiff,
    from_base64,
    from_wire,
    to_wire,
)
from emelex.service import (
    ExternalFilterUnsupported,
    GitRepositoryError,
    GitUnsupported,
    Host,
    NotRepositoryRoot,
    ServiceError,
    SparseCheckoutUnsupported,
    SubmoduleUnsupported,
    UnknownSession,
)
from emelex.service.workspace import _gitwork
from emelex.service.workspace._git import diff_sync, git_status, status_sync
from emelex.service.workspace._patch import capture_sync
from emelex.testing import ScriptedModel
from tests.service.gitrepo import (
    commit,
    git,
    git_home,
    init,
    needs_git,
    oracle,
    ours,
    path_of,
    write,
)

pytestmark = needs_git
__all__ = ["git_home"]  # the fixture, imported for pytest


def status(root: Path) -> GitStatus:
    found = status_sync(str(root))
    assert found is not None
    # Every status is a valid wire value that survives a JSON round trip.
    assert from_wire(GitStatus, to_wire(found)) == found
    return found


def assert_matches_git(root: Path) -> GitStatus:
    found = status(root)
    assert ours(found) == oracle(root)
    # Once git refreshed the index, the stat cache answers (and must agree).
    again = status(root)
    assert ours(again) == oracle(root)
    return found


def apply(old: bytes | None, patch: str | bytes, path: bytes) -> bytes | None:
    """What ``git apply`` makes of ``patch`` on ``old`` (None: the file is absent)."""
    with tempfile.TemporaryDirectory() as scratch:
        base = os.fsencode(scratch)
        target = os.path.join(base, path)
        if old is not None:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "wb") as handle:
                handle.write(old)
        data = patch.encode() if isinstance(patch, str) else patch
        git(scratch, "apply", "--unsafe-paths", "-", input=data)
        try:
            with open(target, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return None


# -- status ------------------------------------------------------------------------------


def test_status_matches_git_on_crlf_names_modes_symlinks_and_renames(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    write(root, "crlf.txt", b"one\r\ntwo\r\nthree\r\n")
    write(root, b"caf\xc3\xa9.txt", "caf\u00e9\n")
    write(root, b"latin\xe9.txt", b"not utf-8 name\n")
    write(root, "run.sh", "#!/bin/sh\n")
    write(root, "dir/keep.txt", "keep\n")
    write(root, "dir/sub/deep.txt", "deep\n")
    write(root, "old-name.txt", "renamed content\n")
    write(root, "gone.txt", "to delete\n")
    write(root, "untrack-me.txt", "tracked, then untracked\n")
    write(root, "type.txt", "a file that becomes a link\n")
    os.symlink("dir/keep.txt", root / "link")
    write(root, ".gitignore", "*.log\nbuild/\n")
    commit(root)
    # CRLF line edited in place, a non-UTF-8 name changed, an executable bit.
    write(root, "crlf.txt", b"one\r\nTWO\r\nthree\r\n")
    write(root, b"latin\xe9.txt", b"changed\n")
    os.chmod(root / "run.sh", 0o755)
    # A rename is a deletion plus an addition; staged and worktree changes on one path.
    os.rename(root / "old-name.txt", root / "new-name.txt")
    git(root, "add", "-A", "old-name.txt", "new-name.txt")
    write(root, "dir/keep.txt", "keep\nstaged\n")
    git(root, "add", "dir/keep.txt")
    write(root, "dir/keep.txt", "keep\nstaged\nand more\n")
    (root / "gone.txt").unlink()
    # Deleted from the index, still on disk: staged deletion and untracked file.
    git(root, "rm", "-q", "--cached", "untrack-me.txt")
    # A symlink retargeted, a file replaced by a symlink.
    (root / "link").unlink()
    os.symlink("crlf.txt", root / "link")
    (root / "type.txt").unlink()
    os.symlink("crlf.txt", root / "type.txt")
    # Untracked: plain, non-UTF-8, nested, ignored (not listed), empty dirs (not listed).
    write(root, "new.txt", "new\n")
    write(root, b"new\xff\xfe.bin", b"\x00\x01")
    write(root, "nested/a/b/c.txt", "nested\n")
    write(root, "debug.log", "ignored\n")
    write(root, "build/out.o", "ignored\n")
    (root / "empty" / "dirs").mkdir(parents=True)
    found = assert_matches_git(root)
    staged = {path_of(e): e for e in found.staged}
    worktree = {path_of(e): e for e in found.worktree}
    assert staged[b"old-name.txt"].change == "deleted"
    assert staged[b"new-name.txt"].change == "added"
    assert staged[b"untrack-me.txt"].change == "deleted"
    assert b"untrack-me.txt" in {path_of(e) for e in found.untracked}
    assert b"dir/keep.txt" in staged and b"dir/keep.txt" in worktree
    assert worktree[b"run.sh"].old_mode == "file" and worktree[b"run.sh"].new_mode == "executable"
    assert worktree[b"type.txt"].change == "typeChanged"
    assert worktree[b"link"].new_mode == "symlink" and worktree[b"link"].change == "modified"
    assert worktree[b"gone.txt"].change == "deleted" and worktree[b"gone.txt"].new_object is None
    assert found.head is not None and len(found.head) == 40
    assert found.head_ref is not None and from_base64(found.head_ref) == b"refs/heads/main"


def test_unborn_repository_has_a_null_head_and_stages_additions(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    empty = status(root)
    assert (empty.head, empty.staged, empty.worktree, empty.untracked) == (None, (), (), ())
    assert empty.head_ref is not None and from_base64(empty.head_ref) == b"refs/heads/main"
    write(root, "a.txt", "a\n")
    git(root, "add", "a.txt")
    write(root, "b.txt", "b\n")
    found = assert_matches_git(root)
    assert found.head is None
    assert [(path_of(e), e.change) for e in found.staged] == [(b"a.txt", "added")]
    assert [path_of(e) for e in found.untracked] == [b"b.txt"]


def test_a_same_size_rewrite_with_its_old_mtime_is_still_seen(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    path = write(root, "a.txt", "aaaa\n")
    commit(root)
    git(root, "status")  # a fresh stat cache for the file
    before = path.stat()
    path.write_text("bbbb\n")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    found = assert_matches_git(root)
    assert [(path_of(e), e.change) for e in found.worktree] == [(b"a.txt", "modified")]


@pytest.mark.parametrize("version", ["2", "3", "4"])
def test_every_index_version_reads_the_same(tmp_path: Path, git_home: Path, version: str) -> None:
    root = init(tmp_path / "repo")
    for n in range(30):
        write(root, f"dir{n % 3}/a-rather-long-shared-prefix-{n:03}.txt", f"{n}\n")
    commit(root)
    git(root, "update-index", "--index-version", version)
    write(root, "dir1/a-rather-long-shared-prefix-004.txt", "changed\n")
    write(root, "dir2/new.txt", "new\n")
    git(root, "add", "dir2/new.txt")
    if version == "4":  # prefix-compressed paths (git may write 3 as 2: no extended flags)
        assert (root / ".git" / "index").read_bytes()[4:8] == b"\0\0\0\x04"
    found = assert_matches_git(root)
    assert [path_of(e) for e in found.staged] == [b"dir2/new.txt"]
    assert [path_of(e) for e in found.worktree] == [b"dir1/a-rather-long-shared-prefix-004.txt"]


def test_detached_head_has_no_ref(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    commit(root)
    head = git(root, "rev-parse", "HEAD").decode().strip()
    git(root, "checkout", "-q", "--detach", head)
    found = status(root)
    assert found.head == head and found.head_ref is None


def test_no_repository_is_none_and_a_subdirectory_is_refused(
    tmp_path: Path, git_home: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    assert status_sync(str(plain)) is None
    assert diff_sync(str(plain), "worktree", b"a.txt") is None
    root = init(tmp_path / "repo")
    (root / "sub").mkdir()
    with pytest.raises(NotRepositoryRoot):
        status_sync(str(root / "sub"))
    with pytest.raises(NotRepositoryRoot):
        diff_sync(str(root / "sub"), "worktree", b"a.txt")


def test_a_linked_worktree_reads_its_own_index_and_head(tmp_path: Path, git_home: Path) -> None:
    base = init(tmp_path / "base")
    write(base, "a.txt", "a\n")
    commit(base)
    linked = tmp_path / "linked"
    git(base, "worktree", "add", "-q", "-b", "feature", str(linked))
    assert (linked / ".git").is_file()  # a gitdir: file, not a directory
    write(linked, "a.txt", "a\nb\n")
    write(linked, "new.txt", "new\n")
    found = assert_matches_git(linked)
    assert found.head_ref is not None and from_base64(found.head_ref) == b"refs/heads/feature"
    assert ours(status(base)) == oracle(base) == ({"staged": {}, "worktree": {}}, set())


def test_a_nested_repository_is_listed_like_git_does(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    commit(root)
    init(root / "inner")
    write(root, "inner/file.txt", "inside\n")
    found = assert_matches_git(root)
    assert [path_of(e) for e in found.untracked] == [b"inner/"]


def test_ten_thousand_files(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    for d in range(100):
        folder = root / f"d{d:02}"
        folder.mkdir()
        for f in range(100):
            (folder / f"f{f:02}.txt").write_text(f"{d} {f}\n")
    commit(root)
    clean = assert_matches_git(root)
    assert (clean.staged, clean.worktree, clean.untracked) == ((), (), ())
    write(root, "d07/f07.txt", "changed\n")
    (root / "d50" / "f50.txt").unlink()
    os.chmod(root / "d99" / "f00.txt", 0o755)
    write(root, "d00/new.txt", "new\n")
    git(root, "rm", "-q", "--cached", "d10/f10.txt")
    found = assert_matches_git(root)
    assert len(found.worktree) == 3 and len(found.untracked) == 2 and len(found.staged) == 1


def test_symlinked_directories_and_files_are_never_followed(tmp_path: Path, git_home: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("outside the workspace\n")
    (outside / "a.txt").write_text("a\n")
    root = init(tmp_path / "repo")
    write(root, "dir/a.txt", "a\n")
    write(root, "file.txt", "outside the workspace\n")
    commit(root)
    # Same names and content behind links: Git (and the Host) see links, not the files.
    os.rename(root / "dir", tmp_path / "moved")
    os.symlink(outside, root / "dir")
    (root / "file.txt").unlink()
    os.symlink(outside / "secret.txt", root / "file.txt")
    found = assert_matches_git(root)
    worktree = {path_of(e): e.change for e in found.worktree}
    assert worktree == {b"dir/a.txt": "deleted", b"file.txt": "typeChanged"}
    # The diff reads the link, never the file it names.
    diff = diff_sync(str(root), "worktree", b"file.txt")
    assert isinstance(diff, GitTextDiff)
    assert "+outside the workspace" not in diff.patch
    assert f"+{outside / 'secret.txt'}" in diff.patch
    blob = git(root, "rev-parse", "HEAD:dir/a.txt").decode().strip()
    assert diff_sync(str(root), "worktree", b"dir/a.txt") == GitTextDiff(
        path=base64.b64encode(b"dir/a.txt").decode(),  # type: ignore[arg-type]
        old_mode="file",
        new_mode=None,
        old_object=blob,  # type: ignore[arg-type]
        new_object=None,
        patch="diff --git a/dir/a.txt b/dir/a.txt\ndeleted file mode 100644\n"
        f"index {blob}..{'0' * 40}\n"
        "--- a/dir/a.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n",
    )


def test_symlink_swaps_during_reads_never_leak_outside_files(
    tmp_path: Path, git_home: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.txt").write_text("TOP-SECRET file\n")
    (outside / "inner.txt").write_text("TOP-SECRET inner\n")
    root = init(tmp_path / "repo")
    write(root, "file.txt", "public\n")
    write(root, "sub/inner.txt", "public inner\n")
    commit(root)
    write(root, "file.txt", "public, edited\n")
    stop = threading.Event()

    def flip() -> None:
        # Swap the file for a link to the outside file and back, and the directory for a
        # link to the outside directory (same names inside) and back, as fast as possible.
        while not stop.is_set():
            os.symlink(outside / "file.txt", root / "link.tmp")
            os.replace(root / "link.tmp", root / "file.txt")
            (root / "file.tmp").write_text("public, edited\n")
            os.replace(root / "file.tmp", root / "file.txt")
            os.rename(root / "sub", root / "sub.real")
            os.symlink(outside, root / "sub")
            os.unlink(root / "sub")
            os.rename(root / "sub.real", root / "sub")

    flipper = threading.Thread(target=flip)
    flipper.start()
    seen = []
    try:
        for _ in range(150):
            for call in (
                lambda: diff_sync(str(root), "worktree", b"file.txt"),
                lambda: diff_sync(str(root), "worktree", b"sub/inner.txt"),
                lambda: status_sync(str(root)),
                lambda: capture_sync(str(root)).data,
            ):
                try:
                    seen.append(repr(call()))
                except GitRepositoryError as exc:  # a file changed under a read: typed
                    seen.append(str(exc))
    finally:
        stop.set()
        flipper.join()
    assert len(seen) == 600
    assert not [found for found in seen if "TOP-SECRET" in found]


# -- unsupported features ----------------------------------------------------------------


def test_external_filters_are_refused(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    write(root, ".gitattributes", "*.txt filter=lfs diff=lfs merge=lfs -text\n")
    commit(root)
    with pytest.raises(ExternalFilterUnsupported):
        status_sync(str(root))
    with pytest.raises(ExternalFilterUnsupported):
        diff_sync(str(root), "worktree", b"a.txt")
    # Also from a subdirectory's attributes, and from .git/info/attributes.
    root2 = init(tmp_path / "repo2")
    write(root2, "sub/.gitattributes", "*.bin filter=secret\n")
    with pytest.raises(ExternalFilterUnsupported):
        status_sync(str(root2))
    root3 = init(tmp_path / "repo3")
    write(root3, ".git/info/attributes", "* filter=x\n")
    with pytest.raises(ExternalFilterUnsupported):
        status_sync(str(root3))


def test_unsetting_attributes_is_fine_but_conversions_are_refused(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    write(root, ".gitattributes", "*.png binary\n*.dat -text -diff\n# text=auto\n")
    commit(root)
    assert_matches_git(root)
    write(root, ".gitattributes", "* text=auto eol=lf\n")
    with pytest.raises(GitUnsupported):
        status_sync(str(root))
    git(root, "config", "core.autocrlf", "true")
    write(root, ".gitattributes", "")
    with pytest.raises(GitUnsupported):
        status_sync(str(root))


def test_sparse_checkout_is_refused(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "keep/a.txt", "a\n")
    write(root, "drop/b.txt", "b\n")
    commit(root)
    git(root, "sparse-checkout", "set", "--no-cone", "/keep/")
    with pytest.raises(SparseCheckoutUnsupported):
        status_sync(str(root))
    # Skip-worktree entries alone (sparse checkout switched off afterwards) too.
    git(root, "config", "core.sparseCheckout", "false")
    with pytest.raises(SparseCheckoutUnsupported):
        status_sync(str(root))


def test_submodules_are_refused(tmp_path: Path, git_home: Path) -> None:
    inner = init(tmp_path / "inner")
    write(inner, "x.txt", "x\n")
    commit(inner)
    root = init(tmp_path / "repo")
    git(root, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(inner), "mod")
    with pytest.raises(SubmoduleUnsupported):
        status_sync(str(root))
    git(root, "commit", "-q", "-m", "with a submodule")
    with pytest.raises(SubmoduleUnsupported):
        status_sync(str(root))
    with pytest.raises(SubmoduleUnsupported):
        diff_sync(str(root), "staged", b"mod")


def test_merges_in_progress_intent_to_add_and_damage_are_typed_errors(
    tmp_path: Path, git_home: Path
) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "base\n")
    commit(root)
    git(root, "checkout", "-q", "-b", "other")
    write(root, "a.txt", "other\n")
    commit(root)
    git(root, "checkout", "-q", "main")
    write(root, "a.txt", "main\n")
    commit(root)
    git(root, "merge", "-q", "other", check=False)  # a conflict: the merge stops
    with pytest.raises(GitUnsupported, match="unmerged"):
        status_sync(str(root))
    git(root, "merge", "--abort")
    write(root, "later.txt", "later\n")
    git(root, "add", "-N", "later.txt")
    with pytest.raises(GitUnsupported, match="intent-to-add"):
        status_sync(str(root))
    git(root, "rm", "-q", "--cached", "later.txt")
    index = root / ".git" / "index"
    data = bytearray(index.read_bytes())
    data[40] ^= 0xFF  # inside the first entry: the checksum no longer matches
    index.write_bytes(bytes(data))
    with pytest.raises(GitRepositoryError, match="checksum"):
        status_sync(str(root))
    index.write_bytes(b"DIRC\x00\x00\x00\x09")
    with pytest.raises(GitRepositoryError):
        status_sync(str(root))


def test_hooks_and_fsmonitor_never_run(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    marker = tmp_path / "ran"
    script = root / ".git" / "fsmonitor.sh"
    script.write_text(f"#!/bin/sh\ntouch {marker}\n")
    script.chmod(0o755)
    git(root, "config", "core.fsmonitor", str(script))
    for hook in ("post-checkout", "pre-commit", "post-index-change"):
        path = root / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\ntouch {marker}\n")
        path.chmod(0o755)
    write(root, "a.txt", "a\n")
    status_sync(str(root))
    diff_sync(str(root), "untracked", b"a.txt")
    assert not marker.exists()


# -- diff --------------------------------------------------------------------------------


def test_text_diffs_of_each_area_apply_with_git(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    head = "".join(f"line {n}\r\n" for n in range(40)).encode()
    write(root, "crlf.txt", head)
    write(root, b"\xe2\x98\x83 snow.txt", "snow\n")
    commit(root)
    staged = head.replace(b"line 3\r\n", b"line three\r\n")
    write(root, "crlf.txt", staged)
    git(root, "add", "crlf.txt")
    work = staged.replace(b"line 30\r\n", b"") + b"no newline at end"
    write(root, "crlf.txt", work)
    diff = diff_sync(str(root), "staged", b"crlf.txt")
    assert isinstance(diff, GitTextDiff) and "\r\n" in diff.patch
    assert apply(head, diff.patch, b"crlf.txt") == staged
    diff = diff_sync(str(root), "worktree", b"crlf.txt")
    assert isinstance(diff, GitTextDiff) and diff.patch.endswith("\\ No newline at end of file\n")
    assert apply(staged, diff.patch, b"crlf.txt") == work
    write(root, "fresh/new.txt", "brand\nnew\n")
    diff = diff_sync(str(root), "untracked", b"fresh/new.txt")
    assert isinstance(diff, GitTextDiff) and diff.old_mode is None and diff.new_mode == "file"
    assert apply(None, diff.patch, b"fresh/new.txt") == b"brand\nnew\n"
    # A quoted non-ASCII name, an executable bit and the HEAD side of a deletion.
    os.chmod(root / "\u2603 snow.txt", 0o755)
    diff = diff_sync(str(root), "worktree", "\u2603 snow.txt".encode())
    assert isinstance(diff, GitTextDiff)
    assert diff.patch.startswith('diff --git "a/\\342\\230\\203 snow.txt"')
    assert "old mode 100644\nnew mode 100755\n" in diff.patch
    assert diff == diff_sync(str(root), "worktree", "\u2603 snow.txt".encode())


def test_binary_unchanged_and_unsupported_results(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "image.bin", b"\x89PNG\x00\x01\x02")
    write(root, "latin.txt", b"caf\xe9\n")
    write(root, "same.txt", "same\n")
    write(root, "big.txt", "small\n")
    commit(root)
    write(root, "image.bin", b"\x89PNG\x00\x01\x02\x03")
    diff = diff_sync(str(root), "worktree", b"image.bin")
    assert isinstance(diff, GitBinaryDiff) and (diff.old_size, diff.new_size) == (7, 8)
    assert isinstance(diff_sync(str(root), "worktree", b"same.txt"), GitUnchangedDiff)
    assert isinstance(diff_sync(str(root), "staged", b"same.txt"), GitUnchangedDiff)
    assert isinstance(diff_sync(str(root), "worktree", b"never/was.txt"), GitUnchangedDiff)
    assert isinstance(diff_sync(str(root), "staged", b"same.txt/below"), GitUnchangedDiff)
    write(root, "latin.txt", b"na\xefve\n")
    assert diff_sync(str(root), "worktree", b"latin.txt") == GitUnsupportedDiff(
        path=base64.b64encode(b"latin.txt").decode(),  # type: ignore[arg-type]
        reason="notUtf8",
    )
    (root / "same.txt").unlink()
    os.mkfifo(root / "same.txt")
    diff = diff_sync(str(root), "worktree", b"same.txt")
    assert isinstance(diff, GitUnsupportedDiff) and diff.reason == "specialFile"
    # Status agrees with Git: a FIFO is "modified" (unreadable), a directory "deleted".
    (root / "image.bin").unlink()
    write(root, "image.bin/inside.txt", "now a directory\n")
    assert_matches_git(root)
    diff = diff_sync(str(root), "worktree", b"image.bin")
    assert isinstance(diff, GitBinaryDiff) and diff.new_mode is None and diff.new_size == 0
    write(root, "big.txt", b"x" * (MAX_GIT_DIFF_INPUT_BYTES + 1))
    diff = diff_sync(str(root), "worktree", b"big.txt")
    assert isinstance(diff, GitUnsupportedDiff) and diff.reason == "tooLarge"
    for bad in (b"", b"/abs", b"a/../b", b".git/config", b"a//b"):
        with pytest.raises(ServiceError):
            diff_sync(str(root), "worktree", bad)


# -- cancellation and the Host -----------------------------------------------------------


async def test_cancellation_stops_status_between_files(
    tmp_path: Path, git_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = init(tmp_path / "repo")
    for n in range(2000):
        write(root, f"d{n % 20}/f{n}.txt", f"{n}\n")
    commit(root)
    for path in root.glob("d*/*.txt"):
        os.utime(path, ns=(1, 1))  # stale stat data: every file must be hashed
    started = threading.Event()
    calls = [0]
    real = _gitwork.hash_file

    def counting(*args: Any, **kwargs: Any) -> str | None:
        calls[0] += 1
        started.set()
        return real(*args, **kwargs)

    monkeypatch.setattr(_gitwork, "hash_file", counting)
    with trio.fail_after(60):
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(git_status, str(root))
                await trio.to_thread.run_sync(started.wait)
                scope.cancel()
    assert scope.cancelled_caught
    assert 0 < calls[0] < 2000  # it stopped early...
    # ...and the cancelled call returned only once its worker thread had finished.
    assert not [t for t in threading.enumerate() if t.name == "emelex-worker:git-status"]


def helper() -> Agent:
    return Agent.builder().name("helper").instructions("Help.").model(ScriptedModel([])).build()


async def test_host_operations_read_the_sessions_workspace(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "a.txt", "a\n")
    commit(root)
    write(root, "a.txt", "b\n")
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        session = (await host.create_session("helper", root, operation="c")).session
        found = await host.git_status(session.id)
        assert found is not None and ours(found) == oracle(root)
        diff = await host.git_diff(session.id, "worktree", b"a.txt")
        assert isinstance(diff, GitTextDiff) and "-a\n+b\n" in diff.patch
        with pytest.raises(UnknownSession):
            await host.git_status("s-missing")
        plain = tmp_path / "plain"
        plain.mkdir()
        other = (await host.create_session("helper", plain, operation="p")).session
        assert await host.git_status(other.id) is None
        assert await host.git_diff(other.id, "untracked", b"x") is None


# -- random edits against the oracle -----------------------------------------------------

NAMES = ["a.txt", "b.txt", "dir/c.txt", "dir/sub/d.txt", "e f.txt", "caf\u00e9.txt"]
CONTENTS = [b"", b"one\n", b"one\r\ntwo\r\n", b"bin\x00ary", b"no newline", b"one\ntwo\n"]
edits = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(NAMES), st.sampled_from(CONTENTS)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES), st.just(b"")),
        st.tuples(st.just("chmod"), st.sampled_from(NAMES), st.just(b"")),
        st.tuples(st.just("link"), st.sampled_from(NAMES), st.sampled_from([b"a.txt", b"x"])),
        st.tuples(st.just("add"), st.sampled_from(NAMES), st.just(b"")),
        st.tuples(st.just("unstage"), st.sampled_from(NAMES), st.just(b"")),
        st.tuples(st.just("commit"), st.just(""), st.just(b"")),
        st.tuples(st.just("dirify"), st.sampled_from(NAMES), st.just(b"")),
    ),
    max_size=12,
)


def _edit(root: Path, op: str, name: str, data: bytes) -> None:
    path = root / name
    if op in ("write", "link"):
        if path.is_symlink() or path.is_file():
            path.unlink()
        if not path.is_dir():
            path.parent.mkdir(parents=True, exist_ok=True)
            if op == "write":
                path.write_bytes(data)
            else:
                os.symlink(os.fsdecode(data), path)
    elif op == "delete" and (path.is_symlink() or path.is_file()):
        path.unlink()
    elif op == "chmod" and path.is_file() and not path.is_symlink():
        path.chmod(path.stat().st_mode ^ 0o100)
    elif op == "add" and (path.exists() or path.is_symlink()):
        git(root, "add", "--", name)
    elif op == "unstage":
        git(root, "rm", "-q", "--cached", "--", name, check=False)
    elif op == "commit":
        commit(root)
    elif op == "dirify" and (path.is_symlink() or path.is_file()):
        path.unlink()  # a directory where a file was
        write(path, "inside.txt", "inside\n")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=edits, second=edits)
def test_random_edits_match_git(first: list[Any], second: list[Any]) -> None:
    with tempfile.TemporaryDirectory() as scratch, pytest.MonkeyPatch.context() as patch:
        home = Path(scratch) / "home"
        home.mkdir()
        patch.setenv("HOME", str(home))
        patch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
        patch.setenv("GIT_CONFIG_NOSYSTEM", "1")
        root = init(Path(scratch) / "repo")
        for op in first:
            _edit(root, *op)
        commit(root)
        for op in second:
            _edit(root, *op)
        found = status(root)
        assert ours(found) == oracle(root)
        assert ours(status(root)) == oracle(root)
