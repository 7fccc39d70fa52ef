"""Issue 18 item 10: a custom model's non-JSON arguments never lose a checkpoint.

The attack as reported: an approved ``write_file`` ran, then a call with a Python
``set`` argument made ``run`` raise a raw ``TypeError`` and the history stayed
empty while the file was written. Arguments are now checked to be JSON values (with a
bounded depth) when the round completes, before anything runs: such a round is refused
and the model told why; a later failure still checkpoints what ran.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex._ids import new_id
from emelex.agent import AgentSession, InvalidHistory, ModelFailed
from emelex.agent._arguments import MAX_ARGUMENT_DEPTH
from emelex.model import Message, ToolCall
from emelex.testing import ApproveAll, Call, Fail, Say, ScriptedModel, ScriptedTool


def nested(depth: int) -> dict[str, Any]:
    """Arguments whose nesting (the arguments object being level 1) is ``depth``."""
    value: Any = 0
    for _ in range(depth - 1):
        value = [value]
    return {"deep": value}


def cyclic() -> dict[str, Any]:
    loop: list[Any] = []
    loop.append(loop)
    return {"loop": loop}


BAD: dict[str, Any] = {
    "set": lambda: {"tags": {"a", "b"}},
    "frozenset": lambda: {"tags": frozenset({1})},
    "tuple": lambda: {"pair": (1, 2)},
    "nan": lambda: {"x": math.nan},
    "inf": lambda: {"x": math.inf},
    "minus-inf": lambda: {"nested": {"x": -math.inf}},
    "int-key": lambda: {"map": {1: "one"}},
    "bytes": lambda: {"data": b"raw"},
    "object": lambda: {"thing": object()},
    "too-deep": lambda: nested(MAX_ARGUMENT_DEPTH + 1),
    "cycle": cyclic,
}


def session_for(model: ScriptedModel, workspace: Path, *tools: ScriptedTool) -> AgentSession:
    return (
        AgentSession.builder(model, workspace)
        .include_shell_tool(False)
        .tools(tools)
        .approval_policy(ApproveAll())
        .build()
    )


def assert_json_history(history: tuple[Message, ...]) -> None:
    for message in history:
        for call in message.tool_calls:
            json.dumps(call.arguments, allow_nan=False)


async def test_a_set_after_an_approved_write_keeps_the_write_in_history(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    model = ScriptedModel(
        [
            [Call("write_file", {"path": "a.txt", "content": "hello"})],
            [Call("probe", {"tags": {"a", "b"}})],
            [Say("done")],
        ]
    )
    with trio.fail_after(20), session_for(model, tmp_path, probe) as session:
        turn = await session.run("write, then probe")
        assert turn.response.text == "done"
        assert (tmp_path / "a.txt").read_text() == "hello"
        assert probe.started == []
        history = session.history
        assert [m.role for m in history] == [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant",
        ]
        assert history[1].tool_calls[0].name == "write_file"
        assert not history[2].text.startswith("refused")  # the write's real result
        assert history[3].tool_calls[0].arguments == {}  # the set could not be kept
        assert history[4].text.startswith("refused: nothing in this round ran")
        assert "set" in history[4].text and "/tags" in history[4].text
        assert_json_history(history)


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_non_json_arguments_refuse_the_round_before_it_runs(
    kind: str, tmp_path: Path
) -> None:
    probe = ScriptedTool("probe")
    other = ScriptedTool("other")
    model = ScriptedModel(
        [
            [Call("other", {"fine": True}), Call("probe", BAD[kind]())],
            [Say("understood")],
            [Say("again")],
        ]
    )
    with trio.fail_after(20):
        with session_for(model, tmp_path, probe, other) as session:
            await session.run("go")
            assert probe.started == [] and other.started == []
            texts = [m.text for m in session.history if m.role == "tool"]
            assert len(texts) == 2
            assert all(t.startswith("refused: nothing in this round ran") for t in texts)
            assert "call 2 ('probe') has non-JSON arguments" in texts[0]
            assert_json_history(session.history)
            await session.run("again")  # the session stays usable


async def test_arguments_at_the_depth_bound_are_accepted(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    model = ScriptedModel([[Call("probe", nested(MAX_ARGUMENT_DEPTH))], [Say("ok")]])
    with trio.fail_after(20), session_for(model, tmp_path, probe) as session:
        await session.run("go")
        assert len(probe.started) == 1


async def test_a_failure_after_a_tool_ran_checkpoints_it(tmp_path: Path) -> None:
    probe = ScriptedTool("probe")
    model = ScriptedModel(
        [
            [Call("write_file", {"path": "a.txt", "content": "hello"})],
            [Fail(TypeError("adapter bug"))],
        ]
    )
    with trio.fail_after(20), session_for(model, tmp_path, probe) as session:
        with pytest.raises(ModelFailed) as caught:
            await session.run("write, then break")
        assert caught.value.rolled_back is False
        assert [m.role for m in caught.value.checkpoint] == ["user", "assistant", "tool"]
        assert session.history == caught.value.checkpoint
        assert (tmp_path / "a.txt").read_text() == "hello"


def test_resumed_history_with_unencodable_arguments_is_a_typed_error(tmp_path: Path) -> None:
    call = ToolCall(new_id(), "probe", {"tags": {"a"}})
    history = [
        Message("user", "x"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "ok", tool_call_id=call.id),
    ]
    build = (
        AgentSession.builder(ScriptedModel([]), tmp_path)
        .include_shell_tool(False)
        .tool(ScriptedTool("probe"))
        .history(history)
    )
    with pytest.raises(InvalidHistory, match="cannot be encoded as JSON"):
        build.build()
