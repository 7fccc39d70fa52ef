"""Adversarial filesystem cases: every one must be refused precisely, with zero escapes.

Each test names the attack it covers. "Escape" means: content from outside the root is
returned, or anything outside the root is created, modified or removed.
"""

from __future__ import annotations

import os
import socket
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from emelex.tools.workspace import (
    NotADirectory,
    NotFound,
    NotRegularFile,
    OutsideWorkspace,
    PathRejected,
    SecretPath,
    SymlinkRefused,
    Workspace,
    WorkspaceError,
    edit_file,
    find_files,
    grep,
    list_directory,
    read_file,
    write_file,
)
from emelex.tools.workspace._linux import RENAME_EXCHANGE, renameat2

MARK = "OUTSIDE-SECRET-7f3a"
Snap = Callable[[Path], dict[str, tuple[int, bytes | None]]]


# -- path text ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["..", "../ws_evil/secret.txt", "a/../../x", "a/..", "./.."])
def test_parent_traversal_rejected(ws: Workspace, path: str) -> None:
    with pytest.raises(PathRejected, match="parent traversal"):
        read_file(ws, path)


@pytest.mark.parametrize("path", ["", "a//b", "//etc/passwd"[1:] + "//x"])
def test_empty_path_and_empty_components_rejected(ws: Workspace, path: str) -> None:
    with pytest.raises(PathRejected):
        read_file(ws, path)


def test_nul_byte_rejected_before_any_syscall(ws: Workspace) -> None:
    with pytest.raises(PathRejected, match="NUL"):
        write_file(ws, "a\0b", "x")


def test_overlong_component_and_path_rejected(ws: Workspace, root: Path) -> None:
    with pytest.raises(PathRejected, match="255"):
        write_file(ws, "n" * 256, "x")
    with pytest.raises(PathRejected, match="4096"):
        read_file(ws, "/".join(["d" * 200] * 21))
    # multibyte characters count as bytes: 128 two-byte characters are 256 bytes
    with pytest.raises(PathRejected):
        write_file(ws, "é" * 128, "x")
    assert list(root.iterdir()) == []


def test_absolute_path_outside_refused_without_approval(ws: Workspace) -> None:
    with pytest.raises(OutsideWorkspace):
        read_file(ws, "/etc/hostname")
    with pytest.raises(OutsideWorkspace):
        write_file(ws, "/tmp/emelex-should-not-exist", "x")
    assert not os.path.exists("/tmp/emelex-should-not-exist")


def test_sibling_prefix_root_is_outside(ws: Workspace, root: Path, outside: Path) -> None:
    """``/x/ws_evil`` shares the string prefix ``/x/ws`` but is not inside it."""
    evil = str(outside / "secret.txt")
    assert evil.startswith(str(root))
    with pytest.raises(OutsideWorkspace):
        read_file(ws, evil)
    with pytest.raises(OutsideWorkspace):
        write_file(ws, evil, "pwned")
    assert (outside / "secret.txt").read_text() == MARK + "\n"


def test_absolute_path_inside_root_is_translated(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("inside\n")
    result = read_file(ws, str(root / "a.txt"))
    assert result.text == "inside\n"
    assert result.path == "a.txt"
    assert list_directory(ws, str(root)).path == "."


def test_tilde_is_a_literal_name(ws: Workspace, root: Path) -> None:
    with pytest.raises(NotFound):
        read_file(ws, "~/.bashrc")
    (root / "~").mkdir()
    (root / "~" / "note").write_text("tilde dir\n")
    assert read_file(ws, "~/note").text == "tilde dir\n"


def test_missing_file_is_not_found_not_created(ws: Workspace, root: Path) -> None:
    with pytest.raises(NotFound):
        read_file(ws, "missing.txt")
    with pytest.raises(NotFound):
        edit_file(ws, "missing.txt", "a", "b")
    with pytest.raises(NotFound):
        write_file(ws, "no/such/dir/file.txt", "x")
    assert list(root.iterdir()) == []


# -- symlinks -------------------------------------------------------------------------


def test_symlinked_file_to_outside_refused(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "link.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "link.txt")
    with pytest.raises(SymlinkRefused):
        edit_file(ws, "link.txt", MARK, "pwned")
    assert (outside / "secret.txt").read_text() == MARK + "\n"


def test_symlinked_parent_directory_refused(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "sub").symlink_to(outside / "dir")
    with pytest.raises(SymlinkRefused) as caught:
        read_file(ws, "sub/inner.txt")
    assert caught.value.path == "sub"
    with pytest.raises(SymlinkRefused):
        write_file(ws, "sub/new.txt", "x")
    with pytest.raises(SymlinkRefused):
        list_directory(ws, "sub")
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["inner.txt"]


def test_symlinked_root_is_pinned_to_its_target(tmp_path: Path, root: Path) -> None:
    """The application may give a root through a link; the canonical target is recorded
    and paths through the link's name are then outside (they would need approval)."""
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    (root / "f.txt").write_text("x\n")
    with Workspace.open(alias) as workspace:
        assert workspace.root == str(root)
        assert read_file(workspace, "f.txt").text == "x\n"
        with pytest.raises(OutsideWorkspace):
            read_file(workspace, str(alias / "f.txt"))
        with pytest.raises(SymlinkRefused):
            read_file(workspace, str(alias / "f.txt"), allow_outside=True)


def test_dangling_symlink_write_refused(ws: Workspace, root: Path, tmp_path: Path) -> None:
    target = tmp_path / "created-through-link.txt"
    (root / "dangling").symlink_to(target)
    with pytest.raises(SymlinkRefused):
        write_file(ws, "dangling", "x")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "dangling")
    assert not target.exists()
    assert (root / "dangling").is_symlink()


def test_write_over_symlink_to_outside_refused(
    ws: Workspace, root: Path, outside: Path, snapshot: Snap
) -> None:
    before = snapshot(outside)
    (root / "out.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(SymlinkRefused):
        write_file(ws, "out.txt", "pwned")
    assert snapshot(outside) == before
    assert (root / "out.txt").is_symlink()


def test_symlink_loop_refused(ws: Workspace, root: Path) -> None:
    (root / "a").symlink_to("b")
    (root / "b").symlink_to("a")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "a")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "a/x")
    with pytest.raises(SymlinkRefused):
        write_file(ws, "a/x", "y", create_parents=True)


def test_create_parents_never_walks_through_links(
    ws: Workspace, root: Path, outside: Path, snapshot: Snap
) -> None:
    before = snapshot(outside)
    (root / "mid").symlink_to(outside)
    with pytest.raises(SymlinkRefused):
        write_file(ws, "mid/deeper/file.txt", "x", create_parents=True)
    assert snapshot(outside) == before
    write_file(ws, "real/deeper/file.txt", "ok", create_parents=True)
    assert (root / "real" / "deeper" / "file.txt").read_text() == "ok"


def test_file_swapped_for_symlink_between_calls(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "f.txt").write_text("safe\n")
    assert read_file(ws, "f.txt").text == "safe\n"
    (root / "f.txt").unlink()
    (root / "f.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "f.txt")
    with pytest.raises(SymlinkRefused):
        write_file(ws, "f.txt", "pwned")
    assert (outside / "secret.txt").read_text() == MARK + "\n"


def test_directory_swapped_for_symlink_during_walks(
    ws: Workspace, root: Path, outside: Path
) -> None:
    """A thread atomically exchanges ``sub`` (a real directory) and ``alt`` (a link to the
    outside) over and over while reads, listings, finds and greps run through both names:
    no outside content or name is ever returned."""
    (root / "sub").mkdir()
    (root / "sub" / "inner.txt").write_text("inside inner\n")
    (root / "alt").symlink_to(outside / "dir")
    stop = threading.Event()
    swaps = 0
    dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)

    def flip() -> None:
        nonlocal swaps
        while not stop.is_set():
            renameat2(dir_fd, "sub", dir_fd, "alt", RENAME_EXCHANGE)
            swaps += 1

    calls: list[Callable[[], str]] = [
        lambda: read_file(ws, "sub/inner.txt").text or "",
        lambda: read_file(ws, "alt/inner.txt").text or "",
        lambda: " ".join(e.name for e in list_directory(ws, "alt").entries),
        lambda: " ".join(find_files(ws, "**/*.txt").matches),
        lambda: " ".join(line.text for line in grep(ws, "inner").lines),
        lambda: write_file(ws, "alt/inner.txt", "inside inner\n").path,
    ]
    thread = threading.Thread(target=flip)
    thread.start()
    outcomes: set[str] = set()
    try:
        for _ in range(300):
            for call in calls:
                try:
                    text = call()
                except WorkspaceError as error:
                    outcomes.add(type(error).__name__)
                    continue
                outcomes.add("ok")
                assert MARK not in text
    finally:
        stop.set()
        thread.join()
        os.close(dir_fd)
    assert swaps > 0
    assert "ok" in outcomes
    assert (outside / "dir" / "inner.txt").read_text() == MARK + " inner\n"
    assert sorted(p.name for p in (outside / "dir").iterdir()) == ["inner.txt"]


def test_recursive_tools_never_follow_symlinked_dirs(
    ws: Workspace, root: Path, outside: Path
) -> None:
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("print('inner')\n")
    (root / "escape").symlink_to(outside)
    (root / "escape_file.py").symlink_to(outside / "secret.txt")
    found = find_files(ws, "**/*")
    assert found.matches == ("src/a.py",)
    assert found.skipped_links == 2
    result = grep(ws, "OUTSIDE|inner")
    assert [line.path for line in result.lines] == ["src/a.py"]
    assert all(MARK not in line.text for line in result.lines)


def test_listing_reports_links_without_following(ws: Workspace, root: Path) -> None:
    (root / "loop").symlink_to("loop")
    (root / "dir").mkdir()
    listing = list_directory(ws)
    kinds = {entry.name: entry.kind for entry in listing.entries}
    assert kinds == {"loop": "symlink", "dir": "directory"}


# -- special files --------------------------------------------------------------------


def _in_thread(function: Callable[[], object], seconds: float = 5.0) -> object:
    """Run ``function`` in a thread; fail (rather than hang) if it blocks."""
    box: list[object] = []

    def run() -> None:
        try:
            box.append(function())
        except BaseException as error:
            box.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "operation blocked"
    return box[0]


def test_fifo_refused_without_blocking(ws: Workspace, root: Path) -> None:
    os.mkfifo(root / "pipe")
    for call in (
        lambda: read_file(ws, "pipe"),
        lambda: write_file(ws, "pipe", "x"),
        lambda: edit_file(ws, "pipe", "a", "b"),
        lambda: grep(ws, "x", "pipe"),
        lambda: grep(ws, "x"),
    ):
        outcome = _in_thread(call)
        if isinstance(outcome, BaseException):
            assert isinstance(outcome, NotRegularFile)
    assert stat.S_ISFIFO((root / "pipe").lstat().st_mode)


def test_device_files_refused(ws: Workspace, root: Path) -> None:
    with pytest.raises(NotRegularFile):
        read_file(ws, "/dev/null", allow_outside=True)
    with pytest.raises(NotRegularFile):
        write_file(ws, "/dev/null", "x", allow_outside=True)
    (root / "null").symlink_to("/dev/null")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "null")
    if os.geteuid() == 0:
        os.mknod(root / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
        outcome = _in_thread(lambda: read_file(ws, "zero"))
        assert isinstance(outcome, NotRegularFile)


def test_socket_refused(ws: Workspace, root: Path) -> None:
    path = root / "sock"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(NotRegularFile):
            read_file(ws, "sock")
        with pytest.raises(NotRegularFile):
            write_file(ws, "sock", "x")
    finally:
        server.close()


def test_directory_and_file_confusion(ws: Workspace, root: Path) -> None:
    (root / "d").mkdir()
    (root / "f").write_text("x")
    with pytest.raises(NotRegularFile):
        read_file(ws, "d")
    with pytest.raises(NotRegularFile):
        write_file(ws, "d", "x")
    with pytest.raises(NotADirectory):
        read_file(ws, "f/x")
    with pytest.raises(NotADirectory):
        list_directory(ws, "f")


def test_huge_sparse_file_read_is_bounded(ws: Workspace, root: Path) -> None:
    with open(root / "huge.txt", "wb") as handle:
        handle.write(b"line\n" * 4000)  # text past the 8 KiB binary probe
        handle.truncate(10 * 1024**3)  # 10 GiB, sparse
    result = read_file(ws, "huge.txt", max_bytes=4096)
    assert result.truncated
    assert result.size == 10 * 1024**3
    assert result.text is not None
    assert len(result.text) <= 4096
    assert result.sha256 is None  # too large to hash
    # grep skips it as too large instead of reading 10 GiB
    assert grep(ws, "line", max_file_bytes=1024 * 1024).skipped_large == 1


# -- hard links -----------------------------------------------------------------------


def test_hardlink_to_outside_file_is_never_modified(
    ws: Workspace, root: Path, outside: Path
) -> None:
    """Decision: hard links are allowed, and mutation replaces the *name* atomically,
    so the outside inode (and every other link to it) keeps its content."""
    os.link(outside / "secret.txt", root / "hard.txt")
    inode = (outside / "secret.txt").stat().st_ino
    write_file(ws, "hard.txt", "replaced\n")
    assert (outside / "secret.txt").read_text() == MARK + "\n"
    assert (outside / "secret.txt").stat().st_ino == inode
    assert (outside / "secret.txt").stat().st_nlink == 1
    os.link(outside / "secret.txt", root / "hard2.txt")
    edit_file(ws, "hard2.txt", MARK, "edited")
    assert (outside / "secret.txt").read_text() == MARK + "\n"
    assert (root / "hard2.txt").read_text() == "edited\n"


# -- secrets --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [".env", ".ENV", "app/.Env.Local", ".Ssh/config", "x/.SSH/id_rsa", "Id_RSA.pub"]
)
def test_case_variants_of_secret_names_need_approval(ws: Workspace, root: Path, path: str) -> None:
    target = root / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("TOKEN=1\n")
    with pytest.raises(SecretPath):
        read_file(ws, path)
    assert read_file(ws, path, allow_secret=True).text == "TOKEN=1\n"
    assert find_files(ws, "**/*").matches == ()
    assert grep(ws, "TOKEN").lines == ()
    assert len(grep(ws, "TOKEN", include_secrets=True).lines) == 1


# -- /proc aliases --------------------------------------------------------------------


def test_proc_self_root_alias_refused(ws: Workspace, root: Path) -> None:
    with pytest.raises(SymlinkRefused):
        read_file(ws, "/proc/self/root/etc/hostname", allow_outside=True)
    (root / "r").symlink_to("/proc/self/root")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "r/etc/hostname")
    with pytest.raises(SymlinkRefused):
        find_files(ws, "**", "r")


def test_proc_environ_refused(ws: Workspace, root: Path) -> None:
    with pytest.raises(SecretPath):
        read_file(ws, "/proc/self/environ", allow_outside=True)
    with pytest.raises(SymlinkRefused):  # even once approved: /proc/self is a link
        read_file(ws, "/proc/self/environ", allow_outside=True, allow_secret=True)
    with pytest.raises(SecretPath):
        read_file(ws, f"/proc/{os.getpid()}/environ", allow_outside=True)
    (root / "env").symlink_to(f"/proc/{os.getpid()}/environ")
    with pytest.raises(SymlinkRefused):
        read_file(ws, "env")


def test_approved_outside_path_gets_the_same_checks(
    ws: Workspace, tmp_path: Path, outside: Path
) -> None:
    assert read_file(ws, str(outside / "secret.txt"), allow_outside=True).text == MARK + "\n"
    (tmp_path / "lnk").symlink_to(outside)
    with pytest.raises(SymlinkRefused):
        read_file(ws, str(tmp_path / "lnk" / "secret.txt"), allow_outside=True)
    with pytest.raises(PathRejected):
        read_file(ws, str(outside) + "/../ws_evil/secret.txt", allow_outside=True)


def test_root_renamed_after_open_stays_pinned(tmp_path: Path, root: Path) -> None:
    (root / "f.txt").write_text("original\n")
    with Workspace.open(root) as workspace:
        os.rename(root, tmp_path / "moved")
        root.mkdir()
        (root / "f.txt").write_text("impostor\n")
        assert read_file(workspace, "f.txt").text == "original\n"
        write_file(workspace, "g.txt", "new\n")
    assert (tmp_path / "moved" / "g.txt").read_text() == "new\n"
    assert not (root / "g.txt").exists()
