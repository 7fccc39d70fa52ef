"""An agent served with a harness gets the harness's built-in tools, as `emelex run` gives
a package's agent its harness (and `emelex serve` passes each package's harness)."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from emelex.app import Harness, WorkspacePolicy
from emelex.contracts import ApproveResponse, InteractionsChanged
from emelex.service import Host
from emelex.testing import Call, Say
from tests.service.test_host import agent, until_idle


async def test_a_harness_brings_its_file_tools(tmp_path: Path) -> None:
    scripted = agent([Call("write_file", {"path": "out.txt", "content": "kept"})], [Say("done")])
    rounds = attrs.evolve(scripted, workspace_policy=WorkspacePolicy.read_write())
    harness = attrs.evolve(Harness.base(), name="served", files=True, shell=False)
    work = tmp_path / "work"
    work.mkdir()
    async with Host.open(
        tmp_path / "root", agents={"helper": rounds}, harnesses={"helper": harness}
    ) as host:
        session = (await host.create_session("helper", work, operation="c")).session
        await host.send(session.id, "write it", operation="s")
        with trio.fail_after(30):
            async with host.watch(session.id) as updates:
                async for update in updates:
                    if isinstance(update, InteractionsChanged) and update.pending:
                        pending = update.pending[0]
                        break
        assert pending.tool_call.name == "write_file"
        await host.respond(session.id, pending.id, ApproveResponse(), operation="a")
        await until_idle(host, session.id)
    assert (work / "out.txt").read_text() == "kept"


async def test_a_harness_must_name_an_agent(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="no agent"):
        async with Host.open(tmp_path, agents={}, harnesses={"ghost": Harness.base()}):
            pass
