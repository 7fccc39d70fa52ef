"""Issue 18 item 9: gaps in the secret list, and workspaces rooted in credentials.

Each listed name was readable without approval; ``/proc/<pid>/task/<tid>/environ`` is
the same environment as ``/proc/<pid>/environ``; and a workspace rooted at ``~/.aws`` or
``/x/.ssh`` classified its files by their path relative to the root only.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from emelex.tools.builtin import GrepTool, ListDirectoryTool, ReadFileTool
from emelex.tools.workspace import SecretPath, Workspace, is_secret_path, read_file

from .conftest import invoke


@pytest.mark.parametrize(
    "path",
    [
        ".envrc",
        "app/.envrc",
        ".cargo/credentials",
        ".cargo/credentials.toml",
        ".gem/credentials",
        ".s3cfg",
        ".boto",
        ".config/rclone/rclone.conf",
    ],
)
def test_listed_names_need_approval(root: Path, ws: Workspace, path: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text("token = hunter2\n")
    assert is_secret_path(path)
    assert ReadFileTool(ws).approval_reason({"path": path}) is not None
    with pytest.raises(SecretPath):
        read_file(ws, path)


def test_a_threads_environment_needs_approval(ws: Workspace) -> None:
    tid = threading.get_native_id()
    path = f"/proc/{os.getpid()}/task/{tid}/environ"
    assert is_secret_path(path)
    reason = ReadFileTool(ws).approval_reason({"path": path})
    assert reason is not None and "process environment" in reason


@pytest.mark.parametrize(("folder", "name"), [(".aws", "credentials"), ("x/.ssh", "known_hosts")])
async def test_a_root_inside_a_credentials_folder_classifies_by_absolute_path(
    tmp_path: Path, folder: str, name: str
) -> None:
    directory = tmp_path / folder
    directory.mkdir(parents=True)
    (directory / name).write_text("aws_secret_access_key = hunter2\n")
    with Workspace.open(directory) as ws:
        assert ReadFileTool(ws).approval_reason({"path": name}) is not None
        with pytest.raises(SecretPath):
            read_file(ws, name)
        output = await invoke(GrepTool(ws), {"pattern": "hunter2"})
        assert "hunter2" not in output.text
        if folder.endswith(".ssh"):  # everything below .ssh is secret, the root too
            assert ListDirectoryTool(ws).approval_reason({"path": "."}) is not None
            assert output.is_error and "likely secret" in output.text


def test_ordinary_names_stay_readable(root: Path, ws: Workspace) -> None:
    for path in ("environment.md", "src/env.py", "cargo/credentials.md", "boto.py"):
        assert not is_secret_path(path), path


# issue 30 break 8: each of these was readable without approval
ISSUE_30_PATHS = [
    ".config/git/credentials",
    ".dockercfg",
    ".terraform.d/credentials.tfrc.json",
    ".terraformrc",
    ".composer/auth.json",
    ".aws/sso/cache/0123abcd.json",
    ".m2/settings-security.xml",
    ".config/hub",
    ".local/share/keyrings/login.keyring",
    ".local/share/keyrings/user.keystore",
    ".bash_history",
    ".zsh_history",
    ".psql_history",
    ".mysql_history",
    ".python_history",
    "home/u/.local/share/fish/fish_history",
    ".config/filezilla/sitemanager.xml",
    ".aws/cli/cache/role.json",
    "vault.kdbx",
]


@pytest.mark.parametrize("path", ISSUE_30_PATHS)
def test_issue_30_paths_need_approval(root: Path, ws: Workspace, path: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text("password = hunter2\n")
    assert is_secret_path(path)
    assert is_secret_path(path.upper())  # the rules compare case-insensitively
    assert ReadFileTool(ws).approval_reason({"path": path}) is not None
    with pytest.raises(SecretPath):
        read_file(ws, path)


async def test_issue_30_paths_are_skipped_by_recursive_reads(root: Path, ws: Workspace) -> None:
    for path in ISSUE_30_PATHS:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("password = hunter2\n")
    (root / "notes.txt").write_text("password = visible\n")
    output = await invoke(GrepTool(ws), {"pattern": "password"})
    assert "visible" in output.text
    assert "hunter2" not in output.text


def test_issue_30_near_misses_stay_readable() -> None:
    for path in (
        "src/history.py",
        "docs/bash_history.md",
        "pom/settings.xml",
        ".aws/sso/readme.md",
        "keyrings.md",
        "config/hub.py",
        "terraform/main.tf",
        "app/src/main/res/layout/main.xml",
    ):
        assert not is_secret_path(path), path
