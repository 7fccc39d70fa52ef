"""An agent turn end to end over HTTP: AgentSession → Client(OpenAIModel) → the fault
server's scripted tool-calling stream → ScriptedTool → a second round that answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio

import emelex.testing
from emelex.agent import (
    DEFAULT_TOOL_RETRIES,
    AgentCancellation,
    AgentEvent,
    AgentSession,
    AgentTool,
    AnswerDelta,
    ModelFailed,
    ReasoningDelta,
    RetryBudgetExhausted,
    ToolCompleted,
    TurnCancelled,
    TurnCompleted,
)
from emelex.model import Client, Usage
from emelex.model.openai import OpenAIModel, RateLimited

from .fault_server import FaultServer


def session_over(model: OpenAIModel, workspace: Path, tool: AgentTool) -> AgentSession:
    return (
        AgentSession.builder(Client(model), workspace)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tool(tool)
        .build()
    )


async def test_tool_turn_end_to_end(fault_server: FaultServer, tmp_path: Path) -> None:
    echo = emelex.testing.ScriptedTool("echo")
    events: list[AgentEvent] = []
    async with OpenAIModel(fault_server.url("agent"), "m") as model:
        with session_over(model, tmp_path, echo) as session, trio.fail_after(20):
            turn = await session.run("please echo hi", on_event=events.append)
    assert turn.rounds == 2
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "assistant"]
    assistant, result, answer = turn.messages[1:]
    (call,) = assistant.tool_calls
    assert (call.name, call.arguments) == ("echo", {"text": "hi"})
    assert assistant.reasoning == "I should echo."
    assert echo.started == echo.finished == [call.id]  # the harness's id, not "srv_1"
    assert result.tool_call_id == call.id and result.text == "echo done"
    assert answer.text == turn.response.text == "The tool said: echo done"
    assert turn.usage == Usage(12, 8) + Usage(5, 2)
    assert [e.text for e in events if isinstance(e, ReasoningDelta)] == ["I should echo."]
    assert "".join(e.text for e in events if isinstance(e, AnswerDelta)) == answer.text
    assert any(isinstance(e, ToolCompleted) for e in events)
    assert isinstance(events[-1], TurnCompleted)
    # What the server received in round 2: the call (with the harness's id) and its result.
    second = fault_server.app.requests[1]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["id"] == call.id == second[2]["tool_call_id"]
    assert fault_server.app.requests[0]["tools"][0]["function"]["name"] == "echo"


async def test_backend_errors_fail_the_turn_typed(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    async with OpenAIModel(fault_server.url("ratelimit"), "m") as model:
        with session_over(model, tmp_path, emelex.testing.ScriptedTool("echo")) as session:
            with trio.fail_after(20), pytest.raises(ModelFailed) as caught:
                await session.run("go")
            assert isinstance(caught.value.__cause__, RateLimited)
            assert caught.value.rolled_back and session.history == ()


async def test_malformed_arguments_get_a_correction_and_the_turn_goes_on(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    echo = emelex.testing.ScriptedTool("echo")
    async with OpenAIModel(fault_server.url("agent-retry"), "m") as model:
        with session_over(model, tmp_path, echo) as session, trio.fail_after(20):
            turn = await session.run("please echo hi")
            history = session.history
    assert turn.rounds == 3
    assert [m.role for m in turn.messages] == [
        *("user", "assistant", "tool", "assistant", "tool", "assistant"),
    ]
    bad, correction, good, result, answer = turn.messages[1:]
    # The unparsable call is kept as {} with a correction quoting what the model sent;
    # it never reached the tool.
    (bad_call,) = bad.tool_calls
    assert bad_call.arguments == {} and bad_call.arguments_error is None
    assert correction.tool_call_id == bad_call.id
    assert "not valid JSON" in correction.text
    assert json.dumps('{"text": "hi"') in correction.text
    (good_call,) = good.tool_calls
    assert echo.started == echo.finished == [good_call.id]
    assert result.text == "echo done" and answer.text == "The tool said: echo done"
    # Replayable: the last request holds exactly what the session committed.
    last = fault_server.app.requests[-1]["messages"]
    assert [m["role"] for m in last] == [m.role for m in history[:-1]]
    assert last[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert last[2]["content"] == correction.text
    assert history == turn.messages


async def test_arguments_malformed_every_round_spend_the_tool_retry_budget(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    echo = emelex.testing.ScriptedTool("echo")
    async with OpenAIModel(fault_server.url("bad-args"), "m") as model:
        with session_over(model, tmp_path, echo) as session:
            with trio.fail_after(20), pytest.raises(RetryBudgetExhausted) as caught:
                await session.run("go")
            assert caught.value.tool == "echo" and caught.value.maximum == DEFAULT_TOOL_RETRIES
            assert "not valid JSON" in caught.value.feedback
            # No tool ran, so nothing is committed.
            assert caught.value.rolled_back and session.history == ()
    assert len(fault_server.app.requests) == DEFAULT_TOOL_RETRIES + 1
    assert echo.started == []


async def test_turn_cancellation_closes_the_stream(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    cancellation = AgentCancellation()
    deltas = 0

    def on_event(event: AgentEvent) -> None:
        nonlocal deltas
        if isinstance(event, AnswerDelta):
            deltas += 1
            if deltas == 3:
                cancellation.cancel()

    async with OpenAIModel(fault_server.url("endless"), "m") as model:
        with session_over(model, tmp_path, emelex.testing.ScriptedTool("echo")) as session:
            with trio.fail_after(20), pytest.raises(TurnCancelled):
                await session.run("go", cancellation=cancellation, on_event=on_event)
            await fault_server.wait_client_gone(1)
