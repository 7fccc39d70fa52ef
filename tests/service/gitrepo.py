"""Repositories made by the real ``git`` binary, and its status as the tests' oracle.

The Host never runs git; the tests do, to build repositories the way users do and to
compare the Host's answers with Git's own (``git status --porcelain=v2 -z``).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from emelex.contracts import GitEntry, GitStatus

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="the git binary is not installed")

#: Letters of porcelain v2 for our change kinds, and Git's octal modes for ours.
LETTERS = {"added": "A", "deleted": "D", "modified": "M", "typeChanged": "T"}
MODES = {None: 0, "file": 0o100644, "executable": 0o100755, "symlink": 0o120000}

#: area -> path -> (letter, old mode, new mode)
Areas = dict[str, dict[bytes, tuple[str, int, int]]]


@pytest.fixture
def git_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty HOME and no system config, for git and for the Host alike."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(name, raising=False)
    return home


def git(
    root: Path | str, *args: str | bytes, input: bytes | None = None, check: bool = True
) -> bytes:
    """Run git in ``root`` (fixed identity); its stdout. ``check``: fail on an error."""
    assert GIT is not None
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="Test",
        GIT_AUTHOR_EMAIL="test@example.com",
        GIT_COMMITTER_NAME="Test",
        GIT_COMMITTER_EMAIL="test@example.com",
        GIT_CONFIG_NOSYSTEM="1",
    )
    done = subprocess.run(
        [GIT, "-C", str(root), *args],
        capture_output=True,
        input=input,
        env=env,
        timeout=120,
        check=False,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"git {args!r} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


def init(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    return root


def commit(root: Path, message: str = "work") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)


def write(root: Path, path: bytes | str, data: bytes | str, mode: int = 0o644) -> Path:
    raw = os.fsencode(path) if isinstance(path, str) else path
    target = Path(os.fsdecode(os.path.join(os.fsencode(root), raw)))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data.encode() if isinstance(data, str) else data)
    target.chmod(mode)
    return target


def oracle(root: Path) -> tuple[Areas, set[bytes]]:
    """Git's own status: staged and worktree changes, and untracked paths."""
    out = git(root, "status", "--porcelain=v2", "-z", "--untracked-files=all", "--no-renames")
    areas: Areas = {"staged": {}, "worktree": {}}
    untracked: set[bytes] = set()
    for record in out.split(b"\0"):
        if not record:
            continue
        if record.startswith(b"? "):
            untracked.add(record[2:])
            continue
        assert record.startswith(b"1 "), record
        fields = record.split(b" ", 8)
        x, y = chr(fields[1][0]), chr(fields[1][1])
        m_head, m_index, m_work = (int(f, 8) for f in fields[3:6])
        path = fields[8]
        if x != ".":
            areas["staged"][path] = (x, m_head, m_index)
        if y != ".":
            areas["worktree"][path] = (y, m_index, m_work)
    return areas, untracked


def path_of(entry: GitEntry) -> bytes:
    return base64.b64decode(entry.path)


def ours(status: GitStatus) -> tuple[Areas, set[bytes]]:
    """The Host's status in the oracle's shape."""
    areas: Areas = {"staged": {}, "worktree": {}}
    for area in ("staged", "worktree"):
        for entry in getattr(status, area):
            areas[area][path_of(entry)] = (
                LETTERS[entry.change],
                MODES[entry.old_mode],
                MODES[entry.new_mode],
            )
    return areas, {path_of(entry) for entry in status.untracked}
