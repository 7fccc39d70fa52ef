"""Issue 18, attacks that held: path forms, FIFOs and 2,000-deep trees through the tools.

Each is an attack as a model would send it: a path argument or a workspace laid out to
stall or escape a recursive tool. They must be refused (or bounded) with a typed error
the model can read, and never block the loop or recurse without a bound.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from emelex import EmelexError
from emelex.tools.builtin import FindFilesTool, GrepTool, ListDirectoryTool, ReadFileTool
from emelex.tools.workspace import Workspace, find_files, grep

from .conftest import invoke

DEEP = 2_000


def deep_tree(root: Path, depth: int) -> None:
    """``d/d/.../d/bottom.txt`` ``depth`` levels down, built with ``dir_fd`` so no path
    ever passes PATH_MAX (the full path is about 2 * depth characters long)."""
    fd = os.open(root, os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        bottom = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(bottom, b"needle\n")
        os.close(bottom)
    finally:
        os.close(fd)


def remove_deep_tree(top: Path) -> None:
    """Remove ``top/d/d/...`` one level at a time: ``shutil.rmtree`` recurses once per
    level and would hit the recursion limit (and so would pytest's own cleanup of the
    temporary directory, failing whichever later run tries it)."""
    spare = top.parent / "unnest"
    while (top / "d").is_dir():
        os.rename(top / "d", spare)
        os.rmdir(top)
        os.rename(spare, top)
    shutil.rmtree(top)


@pytest.fixture(scope="module")
def deep_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("deep")
    try:
        deep_tree(root, DEEP)
        (root / "top.txt").write_text("needle at the top\n")
        yield root
    finally:
        if (root / "d").exists():
            remove_deep_tree(root / "d")


@pytest.fixture
def deep(deep_root: Path) -> Iterator[Workspace]:
    with Workspace.open(deep_root) as workspace:
        yield workspace


def test_find_files_over_a_2000_deep_tree_is_bounded(deep: Workspace) -> None:
    result = find_files(deep, "**/*.txt")
    assert "top.txt" in result.matches
    assert result.truncated and result.truncation == "max_depth"
    assert all(match.count("/") < DEEP for match in result.matches)


def test_grep_over_a_2000_deep_tree_is_bounded(deep: Workspace) -> None:
    result = grep(deep, "needle", literal=True)
    assert [line.path for line in result.lines] == ["top.txt"]
    assert result.truncated and result.truncation == "max_depth"


async def test_the_tools_answer_a_2000_deep_tree_without_holding_the_loop(
    deep: Workspace,
) -> None:
    with trio.fail_after(30):
        found = await invoke(FindFilesTool(deep), {"pattern": "**/bottom.txt"})
        searched = await invoke(GrepTool(deep), {"pattern": "needle", "literal": True})
        listed = await invoke(ListDirectoryTool(deep), {"path": "d/d/d"})
    assert not found.is_error and found.text.startswith("[no files match")
    assert "nested too deeply" in found.text
    assert not searched.is_error and "top.txt" in searched.text
    assert not listed.is_error and "d" in listed.text


@pytest.mark.parametrize(
    "path",
    [
        "../outside.txt",
        "a/../../outside.txt",
        "./../outside.txt",
        "a/./b/../../../outside.txt",
        "/etc/passwd",
        "//etc/passwd",
        "/proc/self/root/etc/passwd",
        "nul\0byte",
        "",
        "x" * 5000,
    ],
)
async def test_path_forms_from_the_model_are_refused_by_the_tool(
    tmp_path: Path, root: Path, ws: Workspace, path: str
) -> None:
    (tmp_path / "outside.txt").write_text("secret outside\n")
    with trio.fail_after(10):
        output = await invoke(ReadFileTool(ws), {"path": path})
    assert output.is_error
    assert "secret outside" not in output.text and "root:" not in output.text


async def test_a_fifo_does_not_block_read_or_grep(root: Path, ws: Workspace) -> None:
    os.mkfifo(root / "pipe")  # nobody ever opens the writing end
    (root / "plain.txt").write_text("needle\n")
    with trio.fail_after(10):
        read = await invoke(ReadFileTool(ws), {"path": "pipe"})
        searched = await invoke(GrepTool(ws), {"pattern": "needle", "literal": True})
    assert read.is_error
    assert not searched.is_error and "plain.txt" in searched.text


def test_errors_from_path_forms_are_emelex_errors(ws: Workspace) -> None:
    with pytest.raises(EmelexError):
        grep(ws, "x", "../..")
