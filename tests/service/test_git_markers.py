"""Git views and the files API follow one rule: what the files API never lists (an
``.emelex`` marker directory, at any depth) is not in a status or a diff either."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from emelex.service import InvalidWorkspacePath
from emelex.service.workspace._git import diff_sync, status_sync
from tests.service.gitrepo import commit, git_home, init, needs_git, write

_ = git_home  # the fixture, by name


@needs_git
def test_marker_files_are_neither_status_nor_diff(tmp_path: Path, git_home: Path) -> None:
    root = init(tmp_path / "repo")
    write(root, "kept.txt", "kept\n")
    write(root, "sub/.emelex/tracked", "committed by someone\n")
    commit(root)
    write(root, ".emelex/control", "a served Host's marker\n")
    write(root, "sub/.emelex/tracked", "changed\n")
    write(root, "new.txt", "new\n")
    status = status_sync(str(root))
    assert status is not None
    shown = [e.path for e in (*status.staged, *status.worktree, *status.untracked)]
    assert [base64.b64decode(p) for p in shown] == [b"new.txt"]
    with pytest.raises(InvalidWorkspacePath):
        diff_sync(str(root), "untracked", b".emelex/control")
    with pytest.raises(InvalidWorkspacePath):
        diff_sync(str(root), "worktree", b"sub/.emelex/tracked")
