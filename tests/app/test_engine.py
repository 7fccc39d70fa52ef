"""Engine and Session: turns, bounded event streams, inspection, lifecycle, extensions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from emelex.agent import (
    AgentEvent,
    AnswerDelta,
    SessionClosed,
    ToolCompleted,
    TurnCancelled,
)
from emelex.app import (
    Agent,
    CapabilityPackage,
    CapabilityRef,
    Contribution,
    DuplicateCapability,
    Engine,
    EventsLagged,
    FunctionTool,
    Harness,
    IntegrationMissing,
    IntegrationRequest,
    PluginError,
    SessionNotStarted,
    ToolCallContext,
    UnresolvedCapability,
    tool,
)
from emelex.runtime import AgentCancellation
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel, Wait

from .helpers import builder, outputs, run_collecting, text_of


@tool
async def add(left: int, right: int) -> int:
    """Add two integers."""
    return left + right


def echo_tool(name: str) -> FunctionTool:
    async def handler(args: dict[str, Any]) -> str:
        return f"{name}:{args.get('text', '')}"

    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return FunctionTool(name, f"Echo via {name}.", schema, handler)


async def test_quick_start_with_the_simulated_model() -> None:
    model = ScriptedModel([[Call("add", {"left": 2, "right": 3})], [Say("2 + 3 = 5")]])
    agent = builder(model, "Use the add tool for arithmetic.").tool(add).build()
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.conversation()).start()
        turn, events = await run_collecting(session, "What is 2 + 3?")
    assert turn.response.text == "2 + 3 = 5"
    assert [o.text for o in outputs(events)] == ["5"]
    roles = [m.role for m in session.history]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert text_of(session.history[3]) == "5"
    assert session.closed and engine.sessions == ()


async def test_sessions_are_independent() -> None:
    model = ScriptedModel([[Say("one")], [Say("two")]])
    agent = builder(model).file("notes.md", "shared seed").build()
    async with Engine() as engine:
        first = await engine.create(agent).harness(Harness.worker()).start()
        second = await engine.create(agent).harness(Harness.worker()).start()
        assert engine.sessions == (first, second)
        assert first.session_id != second.session_id
        assert first.workspace_root != second.workspace_root
        (first.workspace_root / "only-first.txt").write_text("x")
        assert not (second.workspace_root / "only-first.txt").exists()
        await first.send_and_wait("hello")
        assert [m.role for m in first.history] == ["system", "user", "assistant"]
        assert [m.role for m in second.history] == ["system"]
        await second.send_and_wait("hello again")
        assert text_of(second.history[-1]) == "two"
        await first.aclose()
        assert engine.sessions == (second,)
    assert second.closed


async def test_events_arrive_in_order_and_end_when_the_session_closes() -> None:
    model = ScriptedModel([[Say("a"), Say("b")], [Say("c")]])
    agent = builder(model).build()
    engine = Engine()
    session = await engine.create(agent).start()
    seen: list[AgentEvent] = []
    async with trio.open_nursery() as nursery:
        stream = session.events()

        async def consume() -> None:
            async for event in stream:
                seen.append(event)

        nursery.start_soon(consume)
        await session.send_and_wait("first")
        await session.send_and_wait("second")
        await session.aclose()
    names = [type(e).__name__ for e in seen]
    one_turn = ["TurnStarted", "ModelStarted", "AnswerDelta", "ModelCompleted", "TurnCompleted"]
    assert names == [*one_turn[:3], "AnswerDelta", *one_turn[3:], *one_turn]
    assert [e.text for e in seen if isinstance(e, AnswerDelta)] == ["a", "b", "c"]
    with pytest.raises(SessionClosed):
        session.events()
    with pytest.raises(SessionClosed):
        await session.send_and_wait("after close")


async def test_a_consumer_a_whole_buffer_behind_is_dropped_not_waited_for() -> None:
    model = ScriptedModel([[Say(f"{i} ") for i in range(50)]])
    agent = builder(model).build()
    engine = Engine()
    session = await engine.create(agent).event_buffer(2).start()
    stream = session.events()
    with trio.fail_after(5):
        turn = await session.send_and_wait("count")  # nobody reads: the turn goes on
    assert turn.response.text == "".join(f"{i} " for i in range(50))
    assert stream.lagged and stream.buffered == 2  # memory stayed bounded
    received = [await stream.receive(), await stream.receive()]
    assert [type(e).__name__ for e in received] == ["TurnStarted", "ModelStarted"]
    with pytest.raises(EventsLagged, match="4 events behind"):
        await stream.receive()
    await session.aclose()


async def test_closing_a_stream_unsubscribes_it() -> None:
    model = ScriptedModel([[Say(f"{i}") for i in range(20)]])
    session = await Engine().create(builder(model).build()).event_buffer(1).start()
    stream = session.events()
    await stream.aclose()
    turn = await session.send_and_wait("go")
    assert turn.response.text == "".join(str(i) for i in range(20))
    assert not stream.lagged
    assert [event async for event in stream] == []
    await session.aclose()


async def test_without_subscribers_events_are_not_kept() -> None:
    model = ScriptedModel([[Say(f"{i}") for i in range(500)]])
    session = await Engine().create(builder(model).build()).event_buffer(1).start()
    turn = await session.send_and_wait("go")
    assert len(turn.response.text) > 500
    await session.aclose()


async def test_inspect_uses_the_turn_request_path() -> None:
    model = ScriptedModel([[Say("first answer")], [Say("second answer")]])
    agent = builder(model, "Answer briefly.").tool(add).build()
    async with Engine() as engine:
        session = await engine.create(agent).harness(Harness.conversation()).start()
        before = await session.inspect()
        assert before.system_prompt is not None
        assert before.system_prompt.startswith("Answer briefly.\n\n## Conversation")
        assert [m.role for m in before.messages] == ["system"]
        assert before.tool_names == ("datetime", "add")
        planned = await session.inspect("hello")
        await session.send_and_wait("hello")
        sent = model.requests[0]
        assert planned.messages == sent.messages
        assert planned.tools == sent.tools
        assert planned.options == sent.options
        after = await session.inspect("again")
        await session.send_and_wait("again")
        assert after.messages == model.requests[1].messages
        assert [m.role for m in after.messages] == ["system", "user", "assistant", "user"]


async def test_inspect_without_starting_leaves_nothing_behind() -> None:
    agent = builder(ScriptedModel([])).file("brief.md", "x").build()
    engine = Engine()
    context = await engine.create(agent).harness(Harness.worker()).inspect()
    assert "read_file" in context.tool_names
    assert engine.sessions == ()
    starter = engine.create(agent)
    session = await starter.start()
    with pytest.raises(SessionNotStarted):
        await starter.start()
    await session.aclose()


async def test_closing_removes_the_private_workspace_and_is_idempotent() -> None:
    agent = builder(ScriptedModel([])).readonly_file("docs/policy.md", "rules").build()
    session = await Engine().create(agent).start()
    root = session.workspace_root
    assert session.private_workspace
    assert (root / "docs" / "policy.md").read_text() == "rules"
    os.chmod(root / "docs", 0o555)  # even an unwritable directory is removed
    await session.aclose()
    await session.aclose()
    assert not root.exists()


async def test_real_workspace_is_kept(tmp_path: Path) -> None:
    (tmp_path / "keep.txt").write_text("kept")
    agent = builder(ScriptedModel([])).workspace(tmp_path).build()
    async with await Engine().create(agent).harness(Harness.worker()).start() as session:
        assert session.workspace_root == agent.workspace
        assert not session.private_workspace
    assert (tmp_path / "keep.txt").read_text() == "kept"


async def test_cancellation_reaches_the_turn() -> None:
    model = ScriptedModel([[Wait(30), Say("late")]])
    session = await Engine().create(builder(model).build()).start()
    cancellation = AgentCancellation()
    async with trio.open_nursery() as nursery:

        async def fire() -> None:
            # Fire once the turn is parked in the model's Wait: no timing guess.
            await trio.testing.wait_all_tasks_blocked()
            cancellation.cancel()

        nursery.start_soon(fire)
        with pytest.raises(TurnCancelled):
            await session.send_and_wait("go", cancellation=cancellation)
    assert [m.role for m in session.history] == ["system"]
    await session.aclose()


async def test_approvals_route_by_session_and_rejected_calls_never_run() -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    async def deploy(target: str) -> str:
        """Deploy a build."""
        ran.append(target)
        return "deployed"

    model = ScriptedModel([[Call("deploy", {"target": "prod"})], [Say("ok")]])
    approvals = ScriptedApprovals([False])
    agent = builder(model).tool(deploy).approver(approvals).build()
    async with Engine() as engine:
        session = await engine.create(agent).start()
        _, events = await run_collecting(session, "ship it")
    assert ran == []
    context = approvals.asked[0]
    assert context.session_id == session.session_id
    assert context.call.name == "deploy" and context.call.arguments == {"target": "prod"}
    assert context.tool.name == "deploy"
    assert "deploy" in context.reason and "prod" in context.reason
    output = outputs(events)[0]
    assert output.is_error and "denied" in output.text
    assert [e.executed for e in events if isinstance(e, ToolCompleted)] == [False]


async def test_tool_context_reports_the_app_session() -> None:
    seen: list[str] = []

    @tool
    async def whoami(ctx: ToolCallContext) -> str:
        """Say which session runs."""
        seen.append(ctx.session_id)
        await ctx.progress("looking")
        return ctx.session_id

    model = ScriptedModel([[Call("whoami")], [Say("done")]])
    async with Engine() as engine:
        session = await engine.create(builder(model).tool(whoami).build()).session_id("s-1").start()
        _, events = await run_collecting(session, "who?")
    assert seen == ["s-1"]
    assert "ToolProgress" in [type(e).__name__ for e in events]


# -- extension points ----------------------------------------------------------------------


@attrs.frozen
class Server:
    name: str


@attrs.define
class RecordingIntegration:
    handles: frozenset[str] = frozenset({"mcp_servers"})
    requests: list[IntegrationRequest] = attrs.Factory(list)
    closed: int = 0

    async def open(self, request: IntegrationRequest) -> Contribution:
        self.requests.append(request)

        async def close() -> None:
            self.closed += 1

        return Contribution(
            tools=(echo_tool("catalog_search"),),
            prompt_sections=("## Catalog\nSearch the catalog first.",),
            handles=self.handles,
            close=close,
        )


async def test_integrations_contribute_tools_and_prompt_and_are_closed() -> None:
    integration = RecordingIntegration()
    model = ScriptedModel([[Call("catalog_search", {"text": "q"})], [Say("found")]])
    agent = builder(model).mcp_server(Server("catalog")).build()
    async with Engine(integrations=[integration]) as engine:
        session = await engine.create(agent).start()
        context = await session.inspect()
        assert context.tool_names == ("catalog_search",)
        assert context.system_prompt is not None and "## Catalog" in context.system_prompt
        _, events = await run_collecting(session, "find")
        assert outputs(events)[0].text == "catalog_search:q"
        assert integration.requests[0].agent is agent
        assert integration.requests[0].session_id == session.session_id
    assert integration.closed == 1


async def test_foreign_mcp_servers_need_an_integration() -> None:
    # McpServer configurations get the built-in integration; anything else needs one.
    with_mcp = builder(ScriptedModel([])).mcp_server(Server("catalog")).build()
    with pytest.raises(IntegrationMissing):
        await Engine().create(with_mcp).start()


async def test_integrations_are_closed_when_a_default_one_fails(tmp_path: Path) -> None:
    (tmp_path / "plugin.toml").write_text('name = "boom"\nentry = "main:register"\n')
    (tmp_path / "main.py").write_text("def register(plugin):\n    raise RuntimeError('boom')\n")
    with_plugin = builder(ScriptedModel([])).plugin(tmp_path).build()
    integration = RecordingIntegration()
    with pytest.raises(PluginError, match="boom"):
        await Engine(integrations=[integration]).create(with_plugin).start()
    assert integration.closed == 1  # opened, then closed when the start failed


async def test_packages_and_references_contribute_tools_and_prompt() -> None:
    package = CapabilityPackage("notes", (echo_tool("note"),), prompt="Keep short notes.")
    resolved: list[CapabilityRef] = []

    async def resolver(ref: CapabilityRef) -> Any:
        resolved.append(ref)
        if ref.id == "acme/crm":
            return CapabilityPackage("crm", (echo_tool("crm_lookup"),), prompt="Use the CRM.")
        return None

    model = ScriptedModel([[Call("crm_lookup", {"text": "bob"})], [Say("done")]])
    agent = (
        builder(model)
        .capability(package)
        .capability(CapabilityRef("acme/crm", {"region": "eu"}))
        .build()
    )
    async with Engine(capability_resolver=resolver) as engine:
        session = await engine.create(agent).start()
        context = await session.inspect()
        assert context.tool_names == ("note", "crm_lookup")
        assert context.system_prompt == "Be helpful.\n\nKeep short notes.\n\nUse the CRM."
        _, events = await run_collecting(session, "look up bob")
    assert outputs(events)[0].text == "crm_lookup:bob"
    assert resolved[0].config == {"region": "eu"}
    unknown = builder(ScriptedModel([])).capability(CapabilityRef("acme/unknown")).build()
    with pytest.raises(UnresolvedCapability):
        await Engine(capability_resolver=resolver).create(unknown).start()
    with pytest.raises(UnresolvedCapability):
        await Engine().create(unknown).start()


async def test_engine_closes_its_sessions_on_exit() -> None:
    agent = builder(ScriptedModel([])).build()
    async with Engine() as engine:
        sessions = [await engine.create(agent).start() for _ in range(3)]
    assert all(s.closed for s in sessions)
    assert isinstance(agent, Agent)


async def test_approver_can_be_shared_across_sessions() -> None:
    @tool(needs_approval=True)
    async def ping() -> str:
        """Ping."""
        return "pong"

    approvals = ApproveAll()
    model = ScriptedModel([[Call("ping")], [Say("a")], [Call("ping")], [Say("b")]])
    agent = builder(model).tool(ping).approver(approvals).build()
    async with Engine() as engine:
        one = await engine.create(agent).start()
        two = await engine.create(agent).start()
        await one.send_and_wait("x")
        await two.send_and_wait("y")
    assert [c.session_id for c in approvals.asked] == [one.session_id, two.session_id]


async def test_a_reference_resolving_to_an_existing_id_is_a_duplicate() -> None:
    async def resolver(ref: CapabilityRef) -> Any:
        return CapabilityPackage("notes", (echo_tool("other"),))

    agent = (
        builder(ScriptedModel([]))
        .capability(CapabilityPackage("notes", (echo_tool("note"),)))
        .capability(CapabilityRef("acme/notes"))
        .build()
    )
    with pytest.raises(DuplicateCapability):
        await Engine(capability_resolver=resolver).create(agent).start()
