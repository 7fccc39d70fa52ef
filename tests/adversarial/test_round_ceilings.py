"""Issue 18 item 2: one model round must never brick a session, before or after resume.

The attacks as reported: a round of 4,100 calls committed a 4,103-message checkpoint
past ``max_messages`` and every later turn failed (resume refused too); an approved
5 MiB ``write_file`` (schema 16 MiB, argument ceiling 4 MiB) committed arguments that
failed every later turn. Now a round is checked whole before any call is approved or
run, refused rounds enter history in a ceiling-safe form, and requests are fitted
under the ceilings so histories committed by older versions stay usable.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

from emelex._ids import new_id
from emelex.agent import (
    AgentSession,
    AgentSessionBuilder,
    ResourceCeilings,
    RoundLimitExceeded,
)
from emelex.agent._ceilings import MiB, check_request, measure_messages
from emelex.model import AgentModel, GenerationRequest, Message, ToolCall
from emelex.testing import ApproveAll, Call, Say, ScriptedModel, ScriptedTool

CALLS = 4_100
LIMIT = ResourceCeilings()


def builder(model: AgentModel, workspace: Path) -> AgentSessionBuilder:
    return AgentSession.builder(model, workspace).include_shell_tool(False)


def assert_within_ceilings(request: GenerationRequest) -> None:
    check_request(measure_messages(request.messages), 0, LIMIT)


def refusals(messages: tuple[Message, ...]) -> list[str]:
    return [m.text for m in messages if m.role == "tool" and m.text.startswith("refused:")]


async def later_turns_and_resume_work(
    session: AgentSession, workspace: Path, *tools: ScriptedTool
) -> None:
    """A later turn works, and so does a session resumed from this history (with the
    same tools, as ``emelex chat --resume`` requires)."""
    model = ScriptedModel([[Say("fine")], [Say("still fine")]])
    resumed_history = session.history
    resume = builder(model, workspace).tools(tools).history(resumed_history)
    with resume.build() as resumed:
        turn = await resumed.run("are you there?")
        assert turn.response.text == "fine"
        await resumed.run("and now?")
        assert resumed.history[: len(resumed_history)] == resumed_history  # never rewritten
    for request in model.requests:
        assert_within_ceilings(request)


async def test_a_round_of_4100_calls_is_refused_before_anything_runs(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    model = ScriptedModel(
        [[Call("probe", {"n": n}) for n in range(CALLS)], [Say("I will ask for less.")]]
    )
    with trio.fail_after(60), builder(model, tmp_path).tool(probe).build() as session:
        turn = await session.run("probe everything")
        assert turn.response.text == "I will ask for less."
        assert probe.started == []  # nothing ran
        history = session.history
        assert len(history) <= LIMIT.max_messages
        assistant = history[1]
        assert 0 < len(assistant.tool_calls) <= 16
        texts = refusals(history)
        assert len(texts) == len(assistant.tool_calls)  # every kept call is answered
        assert "4,100 tool calls" in texts[0] and "max_messages" in texts[0]
        assert f"first {len(assistant.tool_calls)} of the round's 4,100 calls" in texts[0]
        # The model saw the refusal in its next round, within the ceilings.
        assert refusals(model.requests[1].messages) == texts
        assert_within_ceilings(model.requests[1])
        await later_turns_and_resume_work(session, tmp_path, probe)


async def test_a_history_with_a_committed_4100_call_round_resumes(tmp_path: Path) -> None:
    # What older versions stored: the whole round, 4,103 messages with the system prompt.
    calls = tuple(ToolCall(new_id(), "probe", {"n": n}) for n in range(CALLS))
    history = [
        Message("system", "be brief"),
        Message("user", "probe everything"),
        Message("assistant", "", tool_calls=calls),
        *(Message("tool", "ok", tool_call_id=call.id) for call in calls),
    ]
    assert len(history) == 4_103
    model = ScriptedModel([[Call("probe", {"n": 1})], [Say("one was enough")]])
    probe = ScriptedTool("probe")
    with trio.fail_after(60):
        with builder(model, tmp_path).tool(probe).history(history).build() as session:
            turn = await session.run("probe one")
            assert turn.response.text == "one was enough"
            assert len(probe.started) == 1
            assert session.history[:4_103] == tuple(history)
            for request in model.requests:
                assert_within_ceilings(request)
                # The old round is left out of the request, the system prompt is kept.
                assert request.messages[0] == history[0]
                assert request.messages[1].text == "probe one"
            await later_turns_and_resume_work(session, tmp_path, probe)


async def test_an_approved_5_mib_write_is_refused_before_approval(tmp_path: Path) -> None:
    content = "x" * (5 * MiB)
    approvals = ApproveAll()
    model = ScriptedModel(
        [
            [Call("write_file", {"path": "big.txt", "content": content})],
            [Say("I will write it in parts.")],
        ]
    )
    with trio.fail_after(60):
        with builder(model, tmp_path).approval_policy(approvals).build() as session:
            turn = await session.run("write a big file")
            assert turn.response.text == "I will write it in parts."
            assert approvals.asked == []  # refused before anyone was asked
            assert not (tmp_path / "big.txt").exists()
            call = session.history[1].tool_calls[0]
            assert call.name == "write_file" and call.arguments == {}  # too big to keep
            (text,) = refusals(session.history)
            assert "max_tool_argument_bytes" in text and "5,242,9" in text
            assert_within_ceilings(model.requests[1])
            await later_turns_and_resume_work(session, tmp_path)


async def test_a_history_with_an_approved_5_mib_write_resumes(tmp_path: Path) -> None:
    call = ToolCall(new_id(), "write_file", {"path": "big.txt", "content": "x" * (5 * MiB)})
    history = [
        Message("user", "write a big file"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "wrote big.txt", tool_call_id=call.id),
        Message("assistant", "done"),
    ]
    model = ScriptedModel([[Say("hello again")]])
    with trio.fail_after(60), builder(model, tmp_path).history(history).build() as session:
        turn = await session.run("hi")
        assert turn.response.text == "hello again"
        (request,) = model.requests
        assert_within_ceilings(request)
        assert [m.text for m in request.messages] == ["hi"]
        await later_turns_and_resume_work(session, tmp_path)


async def test_arguments_summing_over_the_ceiling_refuse_the_whole_round(
    tmp_path: Path,
) -> None:
    part = "y" * (3 * MiB // 2)
    model = ScriptedModel(
        [
            [Call("write_file", {"path": f"p{n}.txt", "content": part}) for n in range(3)],
            [Say("ok")],
        ]
    )
    approvals = ApproveAll()
    with trio.fail_after(60):
        with builder(model, tmp_path).approval_policy(approvals).build() as session:
            await session.run("write three parts")
            assert approvals.asked == []
            assert _names(tmp_path) == set()  # no part was written
            texts = refusals(session.history)
            assert len(texts) == 3 and "max_tool_argument_bytes" in texts[0]
            kept = sum(len(json.dumps(c.arguments)) for c in session.history[1].tool_calls)
            assert kept <= LIMIT.max_tool_argument_bytes
            assert_within_ceilings(model.requests[1])


async def test_a_small_message_ceiling_keeps_only_the_calls_that_fit(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    model = ScriptedModel([[Call("probe", {"n": n}) for n in range(3)], [Say("ok")]])
    with builder(model, tmp_path).tool(probe).max_messages(4).build() as session:
        await session.run("go")
        assert probe.started == []
        # user, assistant and one result per kept call fill the 4 messages.
        assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool", "tool"]
        assert "first 2 of the round's 3 calls" in refusals(session.history)[0]


async def test_refused_rounds_count_against_max_rounds_and_roll_back(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    big = [Call("probe", {"n": n}) for n in range(5)]
    model = ScriptedModel([big, big, big])
    with builder(model, tmp_path).tool(probe).max_messages(4).max_rounds(2).build() as session:
        with pytest.raises(RoundLimitExceeded) as caught:
            await session.run("go")
        assert caught.value.rolled_back is True  # no tool may have run
        assert session.history == ()
        assert probe.started == []


async def test_tool_schemas_never_advertise_more_than_the_argument_ceiling(
    tmp_path: Path,
) -> None:
    model = ScriptedModel([[Say("a")], [Say("b")]])
    build = builder(model, tmp_path)
    snapshot = build.authority_snapshot()
    with build.build() as session:
        await session.run("hi")
    (write,) = [tool for tool in model.requests[0].tools if tool.name == "write_file"]
    assert write.parameters["properties"]["content"]["maxLength"] == 4 * MiB
    # The authority snapshot keeps the declared schema: stored sessions still match.
    (declared,) = [tool for tool in snapshot.tools if tool.name == "write_file"]
    assert json.loads(declared.parameters)["properties"]["content"]["maxLength"] == 16 * MiB
    smaller = builder(model, tmp_path).max_tool_argument_bytes(1_000)
    with smaller.build() as session:
        await session.run("hi")
    for tool in model.requests[1].tools:
        for bound in _size_bounds(tool.parameters):
            assert bound <= 1_000


def _names(directory: Path) -> set[str]:
    return {entry.name for entry in directory.iterdir()}


def _size_bounds(schema: object) -> list[int]:
    found: list[int] = []
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key in ("maxLength", "maxItems", "maxProperties") and isinstance(value, int):
                found.append(value)
            else:
                found.extend(_size_bounds(value))
    elif isinstance(schema, list):
        for item in schema:
            found.extend(_size_bounds(item))
    return found
