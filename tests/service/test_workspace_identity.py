"""A session's workspace is the directory it was created on: moved away and replaced by
another directory of the same name, no workspace operation serves the impostor."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from emelex.contracts import WorkspacePath
from emelex.service import WorkspaceUnavailable
from tests.service.conftest import OpenHost
from tests.service.gitrepo import commit, git_home, init, needs_git
from tests.service.test_host import agent

_ = git_home


async def _drain(opened: Any) -> None:
    async with opened as updates:
        async for _update in updates:
            pass


def _operations(host: Any, session_id: str) -> dict[str, Callable[[], Awaitable[Any]]]:
    return {
        "listFiles": lambda: host.list_files(session_id),
        "readFile": lambda: _drain(host.read_file(session_id, WorkspacePath.of(b"a.txt"))),
        "watchFiles": lambda: _drain(host.watch_files(session_id)),
        "gitStatus": lambda: host.git_status(session_id),
        "gitDiff": lambda: host.git_diff(session_id, "worktree", b"a.txt"),
        "snapshotPatch": lambda: host.snapshot_patch(session_id, operation="p"),
    }


@needs_git
async def test_an_impostor_directory_is_never_served(
    tmp_path: Path, open_host: OpenHost, git_home: Path
) -> None:
    workspace = init(tmp_path / "ws")
    (workspace / "a.txt").write_text("the real file\n")
    commit(workspace)
    async with open_host(tmp_path / "root", agents={"helper": agent()}) as host:
        session = (await host.create_session("helper", workspace, operation="c")).session
        assert (await host.list_files(session.id)).entries
        os.rename(workspace, tmp_path / "ws-orig")
        impostor = init(tmp_path / "ws")
        (impostor / "a.txt").write_text("IMPOSTOR\n")
        commit(impostor)
        served = []
        for name, call in _operations(host, session.id).items():
            with trio.fail_after(30):
                try:
                    await call()
                except WorkspaceUnavailable:
                    continue
            served.append(name)
        assert served == [], f"these served the impostor: {served}"
