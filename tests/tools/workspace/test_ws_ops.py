"""Behaviour and bounds of the workspace operations (the non-adversarial contract)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from emelex._errors import LimitExceeded
from emelex.tools.workspace import (
    EditMismatch,
    InvalidArgument,
    NotTextFile,
    OutsideWorkspace,
    PathRejected,
    PatternError,
    SecretPath,
    SymlinkRefused,
    Workspace,
    WorkspaceClosed,
    compile_glob,
    edit_file,
    find_files,
    grep,
    is_secret_path,
    list_directory,
    read_file,
    secret_reason,
    write_file,
)
from emelex.tools.workspace._root import split_path


def test_read_whole_file_reports_hash_and_lines(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    result = read_file(ws, "a.txt")
    assert result.text == "one\ntwo\nthree\n"
    assert (result.start_line, result.line_count, result.next_line) == (1, 3, None)
    assert not result.truncated
    assert result.sha256 == hashlib.sha256(b"one\ntwo\nthree\n").hexdigest()


def test_read_line_window_and_pagination(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    page = read_file(ws, "a.txt", offset_line=10, limit_lines=5)
    assert page.text == "".join(f"line {i}\n" for i in range(10, 15))
    assert (page.line_count, page.next_line) == (5, 15)
    beyond = read_file(ws, "a.txt", offset_line=500)
    assert (beyond.text, beyond.line_count, beyond.next_line) == ("", 0, None)
    last = read_file(ws, "a.txt", offset_line=100, limit_lines=5)
    assert (last.text, last.next_line) == ("line 100\n", None)


def test_read_byte_cap_cuts_on_a_line_end(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("aaaa\nbbbb\ncccc\n")
    result = read_file(ws, "a.txt", max_bytes=12)
    assert result.text == "aaaa\nbbbb\n"
    assert result.truncated
    assert result.next_line == 3


def test_read_byte_range_trims_split_characters(ws: Workspace, root: Path) -> None:
    (root / "u.txt").write_text("héllo wörld")
    data = "héllo wörld".encode()
    result = read_file(ws, "u.txt", byte_offset=2, byte_limit=6)  # starts inside "é"
    assert result.text is not None
    assert result.byte_start == 3
    assert data[result.byte_start : result.byte_end].decode() == result.text


def test_read_reports_binary_without_content(ws: Workspace, root: Path) -> None:
    (root / "nul.bin").write_bytes(b"abc\0def")
    (root / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    for name in ("nul.bin", "latin1.txt"):
        result = read_file(ws, name)
        assert result.binary
        assert result.text is None


def test_read_argument_bounds(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("x\n")
    with pytest.raises(LimitExceeded):
        read_file(ws, "a.txt", max_bytes=10**9)
    with pytest.raises(InvalidArgument):
        read_file(ws, "a.txt", offset_line=0)
    with pytest.raises(InvalidArgument):
        read_file(ws, "a.txt", offset_line=1, byte_offset=0)


def test_list_directory_bounded_and_sorted(ws: Workspace, root: Path) -> None:
    for i in range(50):
        (root / f"f{i:02d}").write_text("x")
    (root / ".env").write_text("S=1")
    listing = list_directory(ws, max_entries=10)
    assert [e.name for e in listing.entries] == [".env"] + [f"f{i:02d}" for i in range(9)]
    assert listing.truncated
    assert listing.total_entries == 51
    assert listing.entries[0].secret
    assert listing.entries[1].kind == "file"
    assert listing.entries[1].size == 1


def test_list_secret_directory_needs_approval(ws: Workspace, root: Path) -> None:
    (root / ".ssh").mkdir()
    (root / ".ssh" / "id_ed25519").write_text("k")
    with pytest.raises(SecretPath):
        list_directory(ws, ".ssh")
    assert [e.name for e in list_directory(ws, ".ssh", allow_secret=True).entries] == ["id_ed25519"]


def test_find_files_glob_semantics(ws: Workspace, root: Path) -> None:
    for rel in ["a.py", "src/b.py", "src/deep/c.py", "src/d.txt", ".git/x.py", "src/e.tsx"]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x")
    assert find_files(ws, "*.py").matches == ("a.py",)
    assert find_files(ws, "**/*.py").matches == ("a.py", "src/b.py", "src/deep/c.py")
    assert find_files(ws, "*.py", "src").matches == ("src/b.py",)
    assert find_files(ws, "src/*.{txt,tsx}").matches == ("src/d.txt", "src/e.tsx")
    assert find_files(ws, "**/?.py", skip_dirs=()).matches[0] == ".git/x.py"
    capped = find_files(ws, "**/*", max_results=2)
    assert capped.truncated
    assert capped.truncation == "max_results"
    assert len(capped.matches) == 2
    visited = find_files(ws, "**/*", max_visited=3)
    assert visited.truncation == "max_visited"


def test_glob_errors() -> None:
    with pytest.raises(PatternError):
        compile_glob("")
    with pytest.raises(PatternError):
        compile_glob("../*.py")
    with pytest.raises(PatternError):
        compile_glob("/abs/*.py")
    assert compile_glob("a/*.py").max_depth == 2
    assert compile_glob("**/a").max_depth is None


def test_grep_context_merges_and_numbers(ws: Workspace, root: Path) -> None:
    (root / "f.txt").write_text("a\nhit 1\nb\nc\nhit 2\nd\ne\nf\ng\nhit 3")
    result = grep(ws, "hit", context=1)
    numbered = [(line.line_number, line.text, line.is_match) for line in result.lines]
    assert numbered == [
        (1, "a", False),
        (2, "hit 1", True),
        (3, "b", False),
        (4, "c", False),
        (5, "hit 2", True),
        (6, "d", False),
        (9, "g", False),
        (10, "hit 3", True),
    ]
    assert result.match_count == 3
    assert not result.truncated


def test_grep_literal_case_and_regex(ws: Workspace, root: Path) -> None:
    (root / "f.txt").write_text("a.b\naxb\nA.B\n")
    assert [x.line_number for x in grep(ws, "a.b").lines] == [1, 2]
    assert [x.line_number for x in grep(ws, "a.b", literal=True).lines] == [1]
    assert [x.line_number for x in grep(ws, "a.b", literal=True, case_insensitive=True).lines] == [
        1,
        3,
    ]
    assert [x.line_number for x in grep(ws, "^axb$").lines] == [2]
    with pytest.raises(PatternError):
        grep(ws, "(unclosed")


def test_grep_bounds_report_truncation(ws: Workspace, root: Path) -> None:
    (root / "many.txt").write_text("match\n" * 1000)
    (root / "long.txt").write_text("match" + "x" * 10_000 + "\n")
    by_count = grep(ws, "match", max_matches=5)
    assert by_count.match_count == 5
    assert by_count.truncation == "max_matches"
    by_bytes = grep(ws, "match", "many.txt", max_bytes=60)
    assert by_bytes.truncation == "max_bytes"
    assert sum(len(x.text) + 1 for x in by_bytes.lines) <= 60
    long = grep(ws, "match", "long.txt", max_line_chars=100)
    assert long.lines[0].cut
    assert len(long.lines[0].text) == 100


def test_grep_skips_binary_and_filters_by_glob(ws: Workspace, root: Path) -> None:
    (root / "a.bin").write_bytes(b"needle\0")
    (root / "b.py").write_text("needle\n")
    (root / "c.txt").write_text("needle\n")
    result = grep(ws, "needle")
    assert [x.path for x in result.lines] == ["b.py", "c.txt"]
    assert result.skipped_binary == 1
    assert [x.path for x in grep(ws, "needle", glob="*.py").lines] == ["b.py"]


def test_write_creates_replaces_and_keeps_mode(ws: Workspace, root: Path) -> None:
    created = write_file(ws, "new.txt", "hello\n")
    assert created.created
    assert (root / "new.txt").read_text() == "hello\n"
    os.chmod(root / "new.txt", 0o751)
    replaced = write_file(ws, "new.txt", b"bytes\n")
    assert not replaced.created
    assert (root / "new.txt").read_bytes() == b"bytes\n"
    assert (root / "new.txt").stat().st_mode & 0o7777 == 0o751
    assert replaced.sha256 == hashlib.sha256(b"bytes\n").hexdigest()
    assert sorted(p.name for p in root.iterdir()) == ["new.txt"]  # no temp left


def test_write_bounds_and_secret_approval(ws: Workspace, root: Path) -> None:
    with pytest.raises(LimitExceeded):
        write_file(ws, "big.txt", "x" * 11, max_bytes=10)
    with pytest.raises(SecretPath):
        write_file(ws, "deploy/.env", "A=1", create_parents=True)
    write_file(ws, ".env", "A=1", allow_secret=True)
    assert (root / ".env").read_text() == "A=1"


def test_edit_exact_count_and_hash_precondition(ws: Workspace, root: Path) -> None:
    (root / "c.py").write_text("x = 1\ny = 1\nz = 2\n")
    with pytest.raises(EditMismatch) as caught:
        edit_file(ws, "c.py", "= 1", "= 3")
    assert (caught.value.kind, caught.value.expected, caught.value.actual) == ("count", 1, 2)
    result = edit_file(ws, "c.py", "= 1", "= 3", count=2)
    assert (root / "c.py").read_text() == "x = 3\ny = 3\nz = 2\n"
    assert result.replacements == 2
    with pytest.raises(EditMismatch) as stale:
        edit_file(ws, "c.py", "z = 2", "z = 4", expected_sha256=result.sha256_before)
    assert stale.value.kind == "sha256"
    current = read_file(ws, "c.py").sha256
    edit_file(ws, "c.py", "z = 2", "z = 4", expected_sha256=current)
    assert (root / "c.py").read_text() == "x = 3\ny = 3\nz = 4\n"


def test_edit_refuses_binary_empty_and_noop(ws: Workspace, root: Path) -> None:
    (root / "b.bin").write_bytes(b"a\0b")
    (root / "t.txt").write_text("abc")
    with pytest.raises(NotTextFile):
        edit_file(ws, "b.bin", "a", "c")
    with pytest.raises(InvalidArgument):
        edit_file(ws, "t.txt", "", "x")
    with pytest.raises(InvalidArgument):
        edit_file(ws, "t.txt", "a", "a")
    with pytest.raises(LimitExceeded):
        edit_file(ws, "t.txt", "a", "b", max_bytes=2)


def test_secret_classification_is_data_driven() -> None:
    assert is_secret_path(".aws/credentials")
    assert not is_secret_path(".aws/notes.txt")
    assert is_secret_path("home/u/.config/gcloud/application_default_credentials.json")
    assert is_secret_path(["x", ".Docker", "CONFIG.json"])
    assert secret_reason("certs/server.PEM") == "PEM key or certificate"
    assert not is_secret_path("src/environment.py")


def test_closed_workspace_refuses(root: Path) -> None:
    workspace = Workspace.open(root)
    workspace.close()
    workspace.close()  # idempotent
    with pytest.raises(WorkspaceClosed):
        read_file(workspace, "x")


def test_classify_and_directory_path(ws: Workspace, root: Path, outside: Path) -> None:
    (root / "src").mkdir()
    (root / "lnk").symlink_to(root / "src")
    assert ws.directory_path() == str(root)
    assert ws.directory_path("src") == str(root / "src")
    with pytest.raises(SymlinkRefused):
        ws.directory_path("lnk")
    with pytest.raises(OutsideWorkspace):
        ws.directory_path(str(outside))
    assert ws.directory_path(str(outside), allow_outside=True) == str(outside)
    inside = ws.classify(str(root / "a" / ".env"))
    assert (inside.outside, inside.display, inside.secret_reason()) == (
        False,
        "a/.env",
        "dotenv file",
    )
    assert ws.classify("/etc/hosts").outside


@given(st.text(alphabet="ab./~\0é", max_size=40))
def test_split_path_yields_only_clean_components(path: str) -> None:
    try:
        _absolute, parts = split_path(path)
    except PathRejected:
        return
    assert "\0" not in path
    for part in parts:
        assert part not in ("", ".", "..")
        assert "/" not in part


@given(st.text(alphabet="ab*?[]{},/.!", max_size=30))
def test_glob_compiles_or_raises_a_typed_error(pattern: str) -> None:
    try:
        glob = compile_glob(pattern)
    except PatternError:
        return
    glob.matches("a/b.c")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # root is only read
@given(
    st.one_of(
        st.text(alphabet="ab./~\0", max_size=30),
        st.text(alphabet="ab./", max_size=20).map(lambda tail: "{root}" + tail),
    )
)
def test_classify_path_agrees_with_an_open_workspace(root: Path, path: str) -> None:
    # The pure form (for approval policies, no descriptor) parses exactly like the tools.
    from emelex.tools.workspace import classify_path

    with Workspace.open(root) as workspace:
        text = path.replace("{root}", workspace.root)
        try:
            expected = workspace.classify(text)
        except PathRejected:
            with pytest.raises(PathRejected):
                classify_path(workspace.root, text)
            return
        assert classify_path(workspace.root, text) == expected
