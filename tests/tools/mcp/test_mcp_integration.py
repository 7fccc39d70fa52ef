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


async def test_a_server_samples_the_model_the_application_named() -> None:
    from emelex.agent import ApprovalContext, ApprovalDecision, Approve, Deny
    from emelex.app import ModelSampling

    asked: list[ApprovalContext] = []

    class Gate:
        def __init__(self, allow: bool) -> None:
            self.allow = allow

        async def decide(self, context: ApprovalContext) -> ApprovalDecision:
            asked.append(context)
            return Approve() if self.allow else Deny("no sampling today")

    side_model = ScriptedModel([[Say("a short summary")]])
    results: list[str] = []
    for allow in (True, False):
        sampling = ModelSampling(side_model, approver=Gate(allow), max_tokens=16)
        model = ScriptedModel([[Call("srv__summarise", {"text": "long text"})], [Say("ok")]])
        agent = (
            Agent.builder()
            .name("sampler")
            .instructions("Summarise.")
            .model(model)
            .approver(ApproveAll())
            .mcp_server(stdio_server(sampling=sampling))
            .build()
        )
        with trio.fail_after(TEST_TIMEOUT):
            async with open_supervisor("engine"):
                engine = Engine(integrations=[McpIntegration(allow_stdio=True)])
                async with await engine.create(agent).start() as session:
                    turn = await session.send_and_wait("go")
        results += [m.text for m in turn.messages if m.role == "tool"]
    assert results[0] == "ScriptedModel: a short summary"
    assert "sampling denied: no sampling today" in results[1]
    # The side model got the server's messages, bounded by the application's max_tokens.
    (request,) = side_model.requests
    assert [m.text for m in request.messages] == ["Summarise in five words.", "long text"]
    assert request.options.max_tokens == 16
    assert [c.call.name for c in asked] == ["mcp_sampling", "mcp_sampling"]
    assert asked[0].call.arguments == {"server": "srv", "messages": 1, "max_tokens": 16}


def test_model_sampling_denies_by_default() -> None:
    from emelex.agent import DenyAll
    from emelex.app import ModelSampling

    assert isinstance(ModelSampling(ScriptedModel([])).approver, DenyAll)
