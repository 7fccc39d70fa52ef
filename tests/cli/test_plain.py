"""The plain ``emelex run``/``chat`` session goes through the Engine: the same guarded
tool kinds and authority snapshot as an application session, one Workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from emelex.agent import AgentSession, DenyAll
from emelex.app import Engine, Harness, WorkspacePolicy
from emelex.app._events import GatedTool
from emelex.app._policy import GuardedFileTool, GuardedShellTool
from emelex.cli._plain import PLAIN_INSTRUCTIONS, plain_agent, start_plain_session
from emelex.model import Client
from emelex.testing import ApproveAll, Call, Say, ScriptedModel
from emelex.tools.workspace import Workspace

ALL_TOOLS = (
    "read_file",
    "list_directory",
    "find_files",
    "grep",
    "write_file",
    "edit_file",
    "shell",
)


def _inner(tool: Any) -> Any:
    assert isinstance(tool, GatedTool)
    return tool.inner


async def _start(root: Path, model: ScriptedModel, **flags: bool) -> Any:
    agent, harness = plain_agent(
        Client(model),
        str(root),
        ApproveAll(),
        max_tokens=None,
        shell=flags.get("shell", True),
        file_tools=flags.get("file_tools", True),
    )
    engine = Engine()
    return engine, await start_plain_session(engine, agent, harness, max_rounds=3)


async def test_plain_session_has_the_app_sessions_guarded_tools(tmp_path: Path) -> None:
    engine, session = await _start(tmp_path, ScriptedModel([]))
    async with engine, session:
        turns = session.agent_session
        assert turns.available_tools == ALL_TOOLS
        assert turns.max_rounds == 3
        table = turns._table
        files = [_inner(table[name].tool) for name in ALL_TOOLS[:-1]]
        assert all(isinstance(tool, GuardedFileTool) for tool in files)
        assert isinstance(_inner(table["shell"].tool), GuardedShellTool)
        # The same kinds an application session with a writable worker policy gets.
        agent = plain_agent(
            Client(ScriptedModel([])),
            str(tmp_path),
            ApproveAll(),
            max_tokens=None,
            shell=True,
            file_tools=True,
        )[0]
        app = await engine.create(agent).harness(Harness.shell_worker()).start()
        async with app:
            for name in ALL_TOOLS:
                mine = _inner(table[name].tool)
                theirs = _inner(app.agent_session._table[name].tool)
                assert type(mine) is type(theirs)
                assert type(mine.inner) is type(theirs.inner)
        prompt = turns.history[0]
        assert prompt.role == "system" and prompt.text.startswith(PLAIN_INSTRUCTIONS)


async def test_plain_snapshot_matches_the_standalone_builder(tmp_path: Path) -> None:
    """Chats stored before the Engine path resume: the snapshot is unchanged."""
    for shell, file_tools in ((True, True), (False, True), (True, False), (False, False)):
        engine, session = await _start(
            tmp_path, ScriptedModel([]), shell=shell, file_tools=file_tools
        )
        async with engine, session:
            snapshot = session.agent_session.authority_snapshot
        standalone = (
            AgentSession.builder(ScriptedModel([]), tmp_path)
            .include_shell_tool(shell)
            .include_file_tools(file_tools)
            .approval_policy(DenyAll())
            .authority_snapshot()
        )
        assert snapshot.to_json() == standalone.to_json()


async def test_one_workspace_per_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Workspace] = []
    real_open = Workspace.open

    def counting_open(root: Any, **options: Any) -> Workspace:
        workspace = real_open(root, **options)
        opened.append(workspace)
        return workspace

    monkeypatch.setattr(Workspace, "open", staticmethod(counting_open))
    engine, session = await _start(tmp_path, ScriptedModel([]))
    async with engine, session:
        workspace = session.agent_session.workspace
        assert opened == [workspace]
        for name in ALL_TOOLS[:-1]:
            assert _inner(session.agent_session._table[name].tool)._workspace is workspace
    assert workspace.closed


async def test_plain_run_keeps_its_behaviour(tmp_path: Path) -> None:
    """No hidden paths, writes allowed, no recursive-delete guard (as before)."""
    (tmp_path / "gone").mkdir()
    model = ScriptedModel(
        [
            [
                Call("shell", {"command": "rm -r gone"}),
                Call("write_file", {"path": "new.txt", "content": "hi"}),
            ],
            [Say("done")],
        ]
    )
    engine, session = await _start(tmp_path, model)
    async with engine, session:
        turn = await session.agent_session.run("go")
    assert turn.response.text == "done"
    assert not (tmp_path / "gone").exists()
    assert (tmp_path / "new.txt").read_text() == "hi"


async def test_plain_agent_refuses_a_missing_workspace(tmp_path: Path) -> None:
    from emelex.app import InvalidWorkspaceRoot

    with pytest.raises(InvalidWorkspaceRoot):
        plain_agent(
            Client(ScriptedModel([])),
            str(tmp_path / "missing"),
            ApproveAll(),
            max_tokens=None,
            shell=True,
            file_tools=True,
        )
    assert WorkspacePolicy.read_write().allow_recursive_delete().recursive_delete
