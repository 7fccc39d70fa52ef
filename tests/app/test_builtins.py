"""The built-ins the Engine chooses: recorded in the authority snapshot, bound to the
session's one Workspace."""

from __future__ import annotations

from typing import Any

import pytest

from emelex.app import Engine, Harness, ShellNotAllowed, WorkspacePolicy
from emelex.app._builtins import builtin_names
from emelex.testing import ApproveAll, ScriptedModel
from emelex.tools.workspace import Workspace

from .helpers import builder


async def test_the_snapshot_records_the_builtins_made() -> None:
    agent = builder(ScriptedModel([])).build()
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        settings = session.agent_session.authority_snapshot.builtins
    assert settings.file_tools and not settings.shell and not settings.datetime
    assert builtin_names(agent, Harness.worker()) == frozenset({"files"})

    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.conversation()).start()
        settings = session.agent_session.authority_snapshot.builtins
    assert settings.datetime and not settings.file_tools and not settings.shell


async def test_the_snapshot_records_the_capped_shell_output() -> None:
    harness = Harness.shell_worker(context_tokens=4096)
    assert harness.context_budget is not None
    agent = (
        builder(ScriptedModel([]))
        .workspace_policy(WorkspacePolicy.read_write())
        .approver(ApproveAll())
        .build()
    )
    async with Engine() as engine:
        session = await engine.create(agent).harness(harness).start()
        settings = session.agent_session.authority_snapshot.builtins
    assert settings.shell and settings.file_tools
    assert settings.shell_output_bytes == harness.context_budget.tool_result_bytes
    assert settings.shell_timeout_seconds == 120.0


async def test_the_shell_needs_a_writable_policy() -> None:
    agent = builder(ScriptedModel([])).approver(ApproveAll()).build()
    async with Engine() as engine:
        with pytest.raises(ShellNotAllowed):
            await engine.create(agent).harness(Harness.shell_worker()).start()


async def test_one_workspace_per_session(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Workspace] = []
    real_open = Workspace.open

    def counting_open(root: Any, **options: Any) -> Workspace:
        workspace = real_open(root, **options)
        opened.append(workspace)
        return workspace

    monkeypatch.setattr(Workspace, "open", staticmethod(counting_open))
    agent = builder(ScriptedModel([])).build()
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.worker()).start()
        workspace = session.agent_session.workspace
        assert opened == [workspace]
        await session.aclose()
    assert workspace.closed


async def test_a_failed_start_closes_the_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Workspace] = []
    real_open = Workspace.open

    def counting_open(root: Any, **options: Any) -> Workspace:
        workspace = real_open(root, **options)
        opened.append(workspace)
        return workspace

    monkeypatch.setattr(Workspace, "open", staticmethod(counting_open))
    agent = builder(ScriptedModel([])).approver(ApproveAll()).build()
    async with Engine() as engine:
        with pytest.raises(ShellNotAllowed):
            await engine.create(agent).harness(Harness.shell_worker()).start()
    assert len(opened) == 1 and opened[0].closed
