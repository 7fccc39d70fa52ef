"""The OpenAI-compatible backend against a real OpenAI-compatible server:
llama-cpp-python's own ``llama_cpp.server`` running the tiny model on loopback."""

from __future__ import annotations

import httpx
import trio

from emelex.model import (
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    Message,
    Reasoning,
    TextDelta,
    ToolCall,
    ToolDefinition,
    Usage,
)
from emelex.model.openai import OpenAIModel

GREEDY = GenerationOptions(max_tokens=16, temperature=0.0, seed=7)


def joined(events: list[GenerationEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


async def test_streamed_completion(llama_server: str) -> None:
    request = GenerationRequest(
        [Message.system("You are terse."), Message.user("Say something.")], options=GREEDY
    )
    async with OpenAIModel(llama_server, "tiny") as model:
        with trio.fail_after(60):
            async with model.generate(request) as stream:
                events = [event async for event in stream]
    assert sum(isinstance(event, Completed) for event in events) == 1
    completed = events[-1]
    assert isinstance(completed, Completed)
    response = completed.response
    assert sum(isinstance(event, TextDelta) for event in events) >= 2
    assert joined(events) == response.text and response.text
    assert response.finish_reason in ("length", "stop")
    assert stream.response_id is not None and stream.response_id.startswith("chatcmpl")
    # llama-cpp-python 0.3.36's server ignores stream_options.include_usage (checked):
    # it sends no usage chunk, so the backend counts usage itself and marks it.
    assert isinstance(response.usage, Usage)
    assert response.usage.output_tokens > 0
    assert response.usage.estimated is not stream.usage_reported


async def test_same_seed_same_text_and_history_with_tools(llama_server: str) -> None:
    """The whole request shape (tools, tool-call history, options) is accepted, and a
    greedy generation is reproducible across connections."""
    echo = ToolDefinition(
        "echo", "Echo text", {"type": "object", "properties": {"text": {"type": "string"}}}
    )
    history = [
        Message.user("Echo hi"),
        Message.assistant(tool_calls=[ToolCall("call_1", "echo", {"text": "hi"})]),
        Message.tool("call_1", "hi"),
    ]
    options = GenerationOptions(
        max_tokens=8, temperature=0.0, top_p=0.9, seed=3, stop=["\n\n"], reasoning=Reasoning.OFF
    )
    request = GenerationRequest(history, tools=[echo], options=options)
    texts = []
    async with OpenAIModel(llama_server, "tiny") as model:
        for _ in range(2):
            with trio.fail_after(60):
                async with model.generate(request) as stream:
                    events = [event async for event in stream]
            texts.append(joined(events))
            last = events[-1]
            assert isinstance(last, Completed) and last.response.text == texts[-1]
    assert texts[0] == texts[1]


async def test_cancel_mid_stream_then_generate_again(llama_server: str) -> None:
    # Kept short: this server re-detokenizes the whole output per streamed token (its cost
    # grows quadratically) and finishes a generation even after the client has left.
    long = GenerationRequest(
        [Message.user("Write a lot.")], options=GenerationOptions(max_tokens=60, temperature=0.0)
    )
    short = GenerationRequest([Message.user("Hi")], options=GREEDY)
    limits = httpx.Limits(max_connections=1)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(30.0, pool=5.0)) as http:
        model = OpenAIModel(llama_server, "tiny", http_client=http)
        with trio.fail_after(60):
            seen = 0
            with trio.CancelScope() as scope:
                async with model.generate(long) as stream:
                    async for event in stream:
                        seen += isinstance(event, TextDelta)
                        if seen == 3:
                            scope.cancel()
            assert scope.cancelled_caught
            async with model.generate(short) as stream:
                events = [event async for event in stream]
        last = events[-1]
        assert isinstance(last, Completed) and joined(events) == last.response.text
