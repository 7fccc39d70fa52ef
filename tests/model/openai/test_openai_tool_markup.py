"""Issue 30 break 6 on the OpenAI-compatible backend: a forced tool choice the server
answers without a call is a typed error, not an empty answer (served by the fault
server's scripted streams)."""

from __future__ import annotations

import json

import pytest
import trio

from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    ToolCall,
    ToolCallMissing,
    ToolChoice,
    ToolDefinition,
)
from emelex.model.openai import OpenAIModel

from .fault_server import CALL_ARGUMENTS, FaultServer

ECHO = ToolDefinition(
    "echo", "Echo text", {"type": "object", "properties": {"text": {"type": "string"}}}
)
READ = ToolDefinition(
    "read", "Read a file", {"type": "object", "properties": {"path": {"type": "string"}}}
)


def forced(choice: ToolChoice) -> GenerationRequest:
    options = GenerationOptions(tool_choice=choice)
    return GenerationRequest([Message.user("hi")], tools=[ECHO, READ], options=options)


@pytest.mark.parametrize("choice", [ToolChoice.REQUIRED, ToolChoice.tool("echo")])
async def test_a_text_answer_to_a_forced_choice_is_a_typed_error(
    fault_server: FaultServer, choice: ToolChoice
) -> None:
    async with OpenAIModel(fault_server.url("text"), "m") as model:
        with trio.fail_after(10), pytest.raises(ToolCallMissing) as caught:
            async with model.generate(forced(choice)) as stream:
                [event async for event in stream]
    assert caught.value.text == "Hello, world!" and caught.value.tool == choice.name
    assert "Hello" not in str(caught.value)
    assert fault_server.app.requests[-1]["tool_choice"] is not None


async def test_a_forced_choice_answered_with_the_call_completes(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("tools"), "m") as model:
        with trio.fail_after(10):
            async with model.generate(forced(ToolChoice.tool("echo"))) as stream:
                events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, Completed)
    response = last.response
    assert response.tool_calls[0] == ToolCall("call_abc", "echo", json.loads(CALL_ARGUMENTS))


async def test_an_unforced_text_answer_is_still_an_answer(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("text"), "m") as model:
        with trio.fail_after(10):
            async with model.generate(forced(ToolChoice.AUTO)) as stream:
                events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, Completed) and last.response.text == "Hello, world!"
