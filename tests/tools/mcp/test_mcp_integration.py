"""McpIntegration: an Engine session connected to its agent's MCP servers."""

from __future__ import annotations

import trio

from emelex.app import Agent, Engine, McpIntegration
from emelex.runtime import open_supervisor
from emelex.testing import ApproveAll, Call, Say, ScriptedModel
from tests.tools.mcp.conftest import TEST_TIMEOUT, child_pids, stdio_server


async def test_engine_session_uses_the_agents_mcp_server() -> None:
    model = ScriptedModel([[Call("srv__echo", {"text": "ping"})], [Say("echoed")]])
    agent = (
        Agent.builder()
        .name("mcp-user")
        .instructions("Use the echo tool.")
        .model(model)
        .approver(ApproveAll())
        .mcp_server(stdio_server())
        .build()
    )
    before = child_pids()
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("engine") as supervisor:
            session = (
                await Engine(integrations=[McpIntegration(allow_stdio=True)]).create(agent).start()
            )
            async with session:
                context = await session.inspect()
                assert "srv__echo" in [tool.name for tool in context.tools]
                turn = await session.send_and_wait("echo ping")
                results = [m.text for m in turn.messages if m.role == "tool"]
                assert results == ["ping"]
            assert len(supervisor.snapshot()) == 0
    assert child_pids() <= before
