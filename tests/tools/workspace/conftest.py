from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from emelex.tools.workspace import Workspace

SECRET_MARK = "OUTSIDE-SECRET-7f3a"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """The workspace directory, with an ``_evil`` sibling holding outside content."""
    ws = tmp_path / "ws"
    ws.mkdir()
    evil = tmp_path / "ws_evil"
    evil.mkdir()
    (evil / "secret.txt").write_text(SECRET_MARK + "\n")
    (evil / "dir").mkdir()
    (evil / "dir" / "inner.txt").write_text(SECRET_MARK + " inner\n")
    return ws


@pytest.fixture
def outside(root: Path) -> Path:
    return root.parent / "ws_evil"


@pytest.fixture
def ws(root: Path) -> Iterator[Workspace]:
    with Workspace.open(root) as workspace:
        yield workspace


Snapshot = dict[str, tuple[int, bytes | None]]


@pytest.fixture
def snapshot() -> Callable[[Path], Snapshot]:
    """``snapshot(path)``: inode and content of every file below ``path``."""
    return tree_snapshot


def tree_snapshot(path: Path) -> Snapshot:
    """Inode and content of every file below ``path`` (links not followed)."""
    snapshot: dict[str, tuple[int, bytes | None]] = {}
    for directory, dirs, files in os.walk(path):
        for name in dirs + files:
            full = Path(directory) / name
            info = full.lstat()
            content = full.read_bytes() if full.is_file() and not full.is_symlink() else None
            snapshot[str(full.relative_to(path))] = (info.st_ino, content)
    return snapshot
