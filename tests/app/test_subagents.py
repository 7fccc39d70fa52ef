"""Sub-agents as tools: a child agent's turn runs as one call of the parent, inside the
parent's actor tree, authority, approvals and budget, with its transcript linked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from emelex.agent import (
    AgentCancellation,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    ToolCancellationPolicy,
    ToolProgress,
    TurnCancelled,
)
from emelex.app import (
    Agent,
    Engine,
    Harness,
    InvalidSubAgent,
    SubAgentTool,
    WorkspacePolicy,
    tool,
)
from emelex.runtime import ActorKind, open_supervisor
from emelex.testing import Call, Say, ScriptedModel, ScriptedTool

READER = Harness("reader", files=True)


@tool(needs_approval=True)
async def deploy(target: str) -> str:
    """Deploy to a target."""
    return f"deployed {target}"


class Recording:
    def __init__(self) -> None:
        self.asked: list[ApprovalContext] = []

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        self.asked.append(context)
        return Approve()


def agent(name: str, model: ScriptedModel, *tools: Any, **more: Any) -> Agent:
    builder = Agent.builder().name(name).instructions(f"You are {name}.").model(model)
    for item in tools:
        builder.tool(item)
    if "approver" in more:
        builder.approver(more.pop("approver"))
    if "workspace" in more:
        builder.workspace(more.pop("workspace"))
    if "policy" in more:
        builder.workspace_policy(more.pop("policy"))
    assert not more
    return builder.build()


def tool_texts(messages: Any) -> list[str]:
    return [m.text for m in messages if m.role == "tool"]


async def test_a_research_agent_delegates_to_a_reader_and_links_its_transcript(
    tmp_path: Path,
) -> None:
    (tmp_path / "notes.txt").write_text("the sky is green\n")
    reader_model = ScriptedModel([[Call("read_file", {"path": "notes.txt"})], [Say("green")]])
    reader = agent("reader", reader_model)
    ask = reader.as_tool(name="ask_reader", description="Read files and report.", harness=READER)
    model = ScriptedModel(
        [[Call("ask_reader", {"task": "What colour is the sky?"})], [Say("It is green.")]]
    )
    research = agent("research", model, ask, workspace=tmp_path)
    progress: list[str] = []
    async with Engine() as engine:
        session = await engine.create(research).harness(READER).start()
        async with trio.open_nursery() as nursery, session.events() as events:

            async def watch() -> None:
                async for event in events:
                    if isinstance(event, ToolProgress):
                        progress.append(event.message)

            nursery.start_soon(watch)
            turn = await session.send_and_wait("Find out.")
            nursery.cancel_scope.cancel()
        assert turn.response.text == "It is green."
        call_id = turn.messages[1].tool_calls[0].id
        (result,) = tool_texts(turn.messages)
        transcript = session.transcripts.get(call_id)
    assert transcript is not None and transcript.outcome == "completed"
    assert result.startswith("green") and transcript.session_id in result
    assert transcript.agent == "reader" and transcript.parent_turn_id == turn.turn_id
    # The child read the parent's workspace, and its transcript is the whole turn.
    assert [m.role for m in transcript.messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert "the sky is green" in tool_texts(transcript.messages)[0]
    assert transcript.messages[1].text == "What colour is the sky?"
    # The parent's events showed what the child was doing.
    assert progress == ["reader: read_file"]


async def test_a_child_approval_reaches_the_parent_policy_with_the_chain() -> None:
    approvals, own = Recording(), Recording()
    # The child's own approver (the builder insists on one for a gated tool) is never
    # asked: a sub-agent's approvals go to its parent's policy.
    child_model = ScriptedModel([[Call("deploy", {"target": "prod"})], [Say("ok")]])
    child = agent("deployer", child_model, deploy, approver=own)
    delegate = child.as_tool(name="delegate", description="Deploy things.")
    parent_model = ScriptedModel([[Call("delegate", {"task": "ship it"})], [Say("shipped")]])
    parent = agent("lead", parent_model, delegate, deploy, approver=approvals)
    async with Engine() as engine:
        session = await engine.create(parent).start()
        turn = await session.send_and_wait("go")
        transcript = session.transcripts.get(turn.messages[1].tool_calls[0].id)
    assert transcript is not None
    (context,) = approvals.asked
    assert context.path == "delegate → deploy"
    (link,) = context.chain
    assert (link.agent, link.tool, link.session_id) == ("lead", "delegate", session.session_id)
    assert link.call_id == turn.messages[1].tool_calls[0].id and link.turn_id == turn.turn_id
    # The call approved is the child's own, in the child's session.
    assert context.session_id == transcript.session_id
    assert context.call.arguments == {"target": "prod"}
    assert "deployed prod" in tool_texts(transcript.messages)
    assert own.asked == []


async def test_a_parent_without_an_approver_denies_the_child_calls() -> None:
    child_model = ScriptedModel([[Call("deploy", {"target": "prod"})], [Say("no")]])
    child = agent("deployer", child_model, deploy, approver=Recording())
    delegate = child.as_tool(name="delegate", description="Deploy things.")
    model = ScriptedModel([[Call("delegate", {"task": "ship it"})], [Say("done")]])
    # ``deploy`` is gated, so the parent needs an approver; give one that denies.

    class No:
        async def decide(self, context: ApprovalContext) -> ApprovalDecision:
            from emelex.agent import Deny

            return Deny("not today")

    parent = agent("lead", model, delegate, deploy, approver=No())
    async with Engine() as engine:
        session = await engine.create(parent).start()
        turn = await session.send_and_wait("go")
        transcript = session.transcripts.get(turn.messages[1].tool_calls[0].id)
    assert transcript is not None
    assert tool_texts(transcript.messages) == ["denied: not today"]


async def test_a_child_never_gets_a_tool_its_parent_lacks() -> None:
    child_model = ScriptedModel([[Say("never")]])
    child = agent("wide", child_model, deploy, approver=Recording())
    delegate = child.as_tool(name="delegate", description="Too wide.")
    parent = agent(
        "lead", ScriptedModel([[Call("delegate", {"task": "x"})], [Say("ok")]]), delegate
    )
    async with Engine() as engine:
        session = await engine.create(parent).start()
        turn = await session.send_and_wait("go")
    (result,) = tool_texts(turn.messages)
    assert "SubAgentTooWide" in result and "deploy" in result
    assert child_model.calls_made == 0


async def test_a_child_writes_only_if_the_parent_may(tmp_path: Path) -> None:
    child_model = ScriptedModel([[Say("listed")]])
    writer = agent("writer", child_model, policy=WorkspacePolicy.read_write())
    delegate = writer.as_tool(name="delegate", description="Write.", harness=READER)
    model = ScriptedModel([[Call("delegate", {"task": "x"})], [Say("ok")]])
    parent = agent("lead", model, delegate, workspace=tmp_path)  # read-only policy
    async with Engine() as engine:
        session = await engine.create(parent).harness(READER).start()
        await session.send_and_wait("go")
    tools = {t.name for t in child_model.requests[0].tools}
    assert "read_file" in tools and "write_file" not in tools


async def test_the_childs_model_calls_count_into_the_parents_budget() -> None:
    child = agent("helper", ScriptedModel([[Say("a")]]))
    delegate = child.as_tool(name="delegate", description="Help.")
    model = ScriptedModel([[Call("delegate", {"task": "x"})], [Say("ok")]])
    parent = agent("lead", model, delegate)
    budget = Harness.worker(context_tokens=None, max_model_calls=10)
    async with Engine() as engine:
        session = await engine.create(parent).harness(budget).start()
        await session.send_and_wait("go")
        usage = session.usage
    assert usage is not None and usage.model_calls == 3  # two of the parent's, one child's


async def test_a_child_past_its_timeout_is_cancelled_and_reported(
    autojump_clock: trio.testing.MockClock,
) -> None:
    slow = ScriptedTool("slow", duration=100, cooperative=True)
    child = agent("slowpoke", ScriptedModel([[Call("slow", {})], [Say("never")]]), slow)
    delegate = child.as_tool(name="delegate", description="Slow.", timeout=5)
    parent = agent(
        "lead", ScriptedModel([[Call("delegate", {"task": "x"})], [Say("ok")]]), delegate, slow
    )
    async with Engine() as engine:
        session = await engine.create(parent).start()
        turn = await session.send_and_wait("go")
        (result,) = tool_texts(turn.messages)
        transcript = session.transcripts.get(turn.messages[1].tool_calls[0].id)
    assert result.startswith("sub-agent timed out")
    assert transcript is not None and transcript.outcome == "timed_out"
    # The child's started tool finished before the child session ended.
    assert slow.started == slow.finished and len(slow.started) == 1
    assert trio.current_time() == pytest.approx(5)


@pytest.mark.parametrize("policy", list(ToolCancellationPolicy))
async def test_cancelling_the_parent_cancels_the_child_and_leaves_no_work(
    policy: ToolCancellationPolicy, autojump_clock: trio.testing.MockClock
) -> None:
    slow = ScriptedTool("slow", duration=100, cooperative=True)
    child_model = ScriptedModel([[Call("slow", {})], [Say("never")]])
    child = agent("worker", child_model, slow)
    delegate = child.as_tool(name="delegate", description="Work.", cancellation_policy=policy)
    parent = agent(
        "lead", ScriptedModel([[Call("delegate", {"task": "x"})], [Say("never")]]), delegate, slow
    )
    cancellation = AgentCancellation()
    nested: list[list[str]] = []
    async with open_supervisor("subagents") as supervisor, Engine() as engine:
        session = await engine.create(parent).start()

        async def cancel_later() -> None:
            await trio.sleep(3)
            tree = supervisor.snapshot()
            # The child's session and tool actors sit below the parent's tool actor.
            (outer,) = [a for a in tree.walk() if a.kind == ActorKind.TOOL and a.name == "delegate"]
            nested.append([a.name for a in outer.walk() if a.kind == ActorKind.TOOL])
            cancellation.cancel()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_later)
            with pytest.raises(TurnCancelled) as caught:
                await session.send_and_wait("go", cancellation=cancellation)
        assert len(supervisor.snapshot()) == 0
        transcript = next(iter(session.transcripts), None)
    assert nested == [["delegate", "slow"]]
    assert slow.started == slow.finished  # the child's tool ran to its one result
    assert caught.value.rolled_back is False  # the delegate call had started
    if policy is ToolCancellationPolicy.FINISH_ONCE_STARTED:
        # The call returned the cancelled child's result, kept in the checkpoint.
        assert transcript is not None and transcript.outcome == "cancelled"
        assert tool_texts(caught.value.checkpoint)[0].startswith("sub-agent cancelled")
    assert trio.current_time() == pytest.approx(3)


async def test_an_unbound_sub_agent_tool_answers_with_an_error(tmp_path: Path) -> None:
    from emelex.agent import AgentSession

    child = agent("child", ScriptedModel([[Say("x")]]))
    delegate = child.as_tool(name="delegate", description="Child.")
    model = ScriptedModel([[Call("delegate", {"task": "x"})], [Say("ok")]])
    builder = (
        AgentSession.builder(model, tmp_path).include_file_tools(False).include_shell_tool(False)
    )
    with builder.tool(delegate).build() as session:
        turn = await session.run("go")
    assert "runs only in a session an Engine started" in tool_texts(turn.messages)[0]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"name": "bad name"}, "name"),
        ({"description": " "}, "description"),
        ({"max_rounds": 0}, "max_rounds"),
        ({"timeout": -1}, "timeout"),
        ({"cancellation_policy": "drop"}, "cancellation_policy"),
    ],
)
def test_as_tool_checks_its_options(options: dict[str, Any], match: str) -> None:
    child = agent("child", ScriptedModel([]))
    given = {"name": "delegate", "description": "Child.", **options}
    with pytest.raises(InvalidSubAgent, match=match):
        child.as_tool(**given)


def test_as_tool_gives_a_task_schema() -> None:
    delegate = agent("child", ScriptedModel([])).as_tool(name="delegate", description="Child.")
    assert isinstance(delegate, SubAgentTool)
    assert delegate.definition.parameters["required"] == ["task"]
    assert delegate.approval_reason({"task": "x"}) is None
