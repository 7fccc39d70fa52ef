"""The workspace's own view name (``/workspace``) and hidden paths, at the I/O layer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.tools.workspace import (
    HiddenPath,
    HiddenPaths,
    OutsideWorkspace,
    PathRejected,
    PatternError,
    Workspace,
    classify_path,
    edit_file,
    find_files,
    grep,
    list_directory,
    read_file,
    write_file,
)

from .conftest import SECRET_MARK


@pytest.fixture
def viewed(root: Path) -> Iterator[Workspace]:
    (root / "a.txt").write_text("alpha\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("alpha beta\n")
    (root / "private").mkdir()
    (root / "private" / "plan.md").write_text("alpha plan\n")
    (root / "sub" / "c.draft").write_text("alpha draft\n")
    hidden = HiddenPaths(("private", "*.draft"))
    with Workspace.open(root, hidden=hidden, view="/workspace") as workspace:
        yield workspace


def test_view_names_files_inside(viewed: Workspace) -> None:
    assert read_file(viewed, "/workspace/a.txt").text == "alpha\n"
    assert read_file(viewed, "/workspace/sub/b.txt").path == "/workspace/sub/b.txt"
    assert read_file(viewed, "a.txt").path == "/workspace/a.txt"
    # The real absolute path still names the same file.
    assert read_file(viewed, f"{viewed.root}/a.txt").path == "/workspace/a.txt"


def test_view_root_is_the_workspace_root(viewed: Workspace) -> None:
    for path in ("/workspace", "/workspace/", "/workspace/.", "."):
        listing = list_directory(viewed, path)
        assert listing.path == "/workspace"
        assert [e.name for e in listing.entries] == ["a.txt", "sub"]


def test_view_does_not_open_the_outside(viewed: Workspace, outside: Path) -> None:
    for path in ("/workspacefoo/a.txt", "/workspace_evil", "/etc/passwd", "/work", "/"):
        with pytest.raises(OutsideWorkspace):
            read_file(viewed, path)
    for path in ("/workspace/../etc/passwd", "/workspace/sub/../../x", "/workspace//a.txt"):
        with pytest.raises(PathRejected):
            read_file(viewed, path)
    with pytest.raises(OutsideWorkspace):
        read_file(viewed, str(outside / "secret.txt"))


def test_results_name_paths_in_the_view(viewed: Workspace) -> None:
    found = find_files(viewed, "**/*.txt", "/workspace")
    assert found.matches == ("/workspace/a.txt", "/workspace/sub/b.txt")
    assert find_files(viewed, "*.txt", "/workspace/sub").matches == ("/workspace/sub/b.txt",)
    lines = grep(viewed, "alpha", "/workspace").lines
    assert {line.path for line in lines} == {"/workspace/a.txt", "/workspace/sub/b.txt"}
    assert grep(viewed, "beta", "/workspace/sub/b.txt").lines[0].path == "/workspace/sub/b.txt"


def test_writes_through_the_view(viewed: Workspace, root: Path) -> None:
    result = write_file(viewed, "/workspace/new/n.txt", b"x\n", create_parents=True)
    assert result.path == "/workspace/new/n.txt"
    assert (root / "new" / "n.txt").read_bytes() == b"x\n"
    edited = edit_file(viewed, "/workspace/new/n.txt", "x", "y")
    assert edited.path == "/workspace/new/n.txt"
    assert (root / "new" / "n.txt").read_bytes() == b"y\n"
    with pytest.raises(OutsideWorkspace):
        write_file(viewed, "/workspacefoo/n.txt", b"x", create_parents=True)
    assert not (root / "workspacefoo").exists()


def test_hidden_paths_are_refused_by_name(viewed: Workspace) -> None:
    for path in ("private", "private/plan.md", "/workspace/private/plan.md", "sub/c.draft"):
        with pytest.raises(HiddenPath):
            read_file(viewed, path)
    with pytest.raises(HiddenPath):
        list_directory(viewed, "/workspace/private")
    with pytest.raises(HiddenPath):
        grep(viewed, "alpha", "private")
    with pytest.raises(HiddenPath):
        write_file(viewed, "private/new.md", b"x")
    with pytest.raises(HiddenPath):
        write_file(viewed, "sub/new.draft", b"x")


def test_walks_never_return_hidden_entries(viewed: Workspace) -> None:
    listing = list_directory(viewed, ".")
    assert [e.name for e in listing.entries] == ["a.txt", "sub"] and listing.hidden == 1
    assert list_directory(viewed, "sub").hidden == 1
    found = find_files(viewed, "**/*")
    assert found.matches == ("/workspace/a.txt", "/workspace/sub/b.txt")
    assert found.skipped_hidden == 2
    grepped = grep(viewed, "alpha")
    assert {line.path for line in grepped.lines} == {"/workspace/a.txt", "/workspace/sub/b.txt"}
    assert grepped.skipped_hidden == 2


def test_without_a_view_paths_stay_relative(ws: Workspace, root: Path) -> None:
    (root / "a.txt").write_text("alpha\n")
    assert find_files(ws, "*.txt").matches == ("a.txt",)
    with pytest.raises(OutsideWorkspace):
        read_file(ws, "/workspace/a.txt")


def test_bad_views_and_patterns_are_typed(root: Path) -> None:
    for view in ("workspace", "/", "/a/../b", ""):
        with pytest.raises(PathRejected):
            Workspace.open(root, view=view)
    with pytest.raises(PatternError):
        HiddenPaths(("a/../b",))
    with pytest.raises(PatternError):
        HiddenPaths((3,))  # type: ignore[arg-type]


_NAME = st.text(alphabet="abw/.", min_size=0, max_size=14)


@given(tail=_NAME)
def test_view_classification_never_climbs_out(tail: str) -> None:
    """Whatever follows ``/workspace``, the path is either refused, inside, or (only when
    the first component is not exactly ``workspace``) outside; never ``..``."""
    path = "/workspace" + tail
    try:
        target = classify_path("/real/root", path, view="/workspace")
    except PathRejected:
        return
    first = path.split("/")[1]
    assert target.outside == (first != "workspace")
    assert ".." not in target.parts
    if not target.outside:
        assert target.absolute_parts[:2] == ("real", "root")


def test_outside_content_stays_unread(viewed: Workspace, outside: Path) -> None:
    with pytest.raises(OutsideWorkspace):
        grep(viewed, SECRET_MARK, str(outside))


_PATTERNS = st.lists(
    st.sampled_from(["*.draft", "private", "/private", "docs/*.md", "docs/**", ".env*", "a?c"]),
    min_size=1,
    max_size=4,
)
_PARTS = st.lists(
    st.sampled_from(["private", "docs", "a.md", "x.draft", ".envrc", "abc", "src"]),
    min_size=1,
    max_size=4,
).map(tuple)


@given(patterns=_PATTERNS, parts=_PARTS)
def test_hidden_paths_agree_with_one_glob_at_a_time(
    patterns: list[str], parts: tuple[str, ...]
) -> None:
    """The combined, cached matcher decides exactly as each pattern alone would."""
    from emelex.tools.workspace import compile_glob

    def alone(pattern: str) -> bool:
        text = pattern.strip("/")
        glob = compile_glob(text)
        if pattern.startswith("/") or "/" in text:
            return any(glob.matches("/".join(parts[:d])) for d in range(1, len(parts) + 1))
        return any(glob.matches(part) for part in parts)

    hidden = HiddenPaths(patterns)
    expected = any(alone(p) for p in patterns)
    assert hidden.hides(parts) is expected
    assert hidden.hides(parts) is expected  # again, from the name cache
