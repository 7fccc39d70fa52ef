"""The usage estimate: bytes over four, framing per message, a counter when given."""

from __future__ import annotations

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import (
    GenerationRequest,
    ImagePart,
    InvalidResponse,
    Message,
    ModelError,
    Response,
    TextPart,
    TokenCounter,
    ToolCall,
    ToolDefinition,
    Usage,
    count_usage,
    estimate_tokens,
    estimate_usage,
    from_json,
    to_json,
)

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16


def test_estimate_tokens_is_utf8_bytes_over_four_rounded_up() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("é") == 1  # 2 bytes
    assert estimate_tokens("日本語") == 3  # 9 bytes
    assert estimate_tokens("\ud800") == 1  # a lone surrogate is counted, not an error


@given(st.text(), st.text())
def test_estimate_tokens_is_subadditive_within_one(a: str, b: str) -> None:
    joined = estimate_tokens(a + b)
    assert joined <= estimate_tokens(a) + estimate_tokens(b) <= joined + 1


def test_estimate_usage_counts_every_part_of_request_and_answer() -> None:
    echo = ToolDefinition("echo", "Echo", {"type": "object"})
    request = GenerationRequest(
        [
            Message.system("abcd"),
            Message.user([TextPart("abcd"), ImagePart(PNG, "image/png")]),
            Message.assistant(tool_calls=[ToolCall("c1", "echo", {"t": 1})]),
            Message.tool("c1", "abcdefgh"),
        ],
        tools=[echo],
    )
    response = Response("abcd", reasoning="abcd", tool_calls=[ToolCall("c2", "echo", {})])
    usage = estimate_usage(request, response)
    # Messages: 4 framing each + 1 + (1 + 1024 for the image) + ('echo{"t":1}' 11 B: 3) + 2.
    declaration = '{"name":"echo","description":"Echo","parameters":{"type":"object"}}'
    tools = 4 + estimate_tokens(declaration)
    assert usage.input_tokens == 4 * 4 + 1 + 1 + 1024 + 3 + 2 + tools
    # Answer: "abcd" + "abcd" + "echo" + "{}" = 14 bytes.
    assert usage.output_tokens == 4 and usage.estimated


def test_estimated_is_a_checked_flag_that_sums_and_survives_the_wire() -> None:
    assert not Usage().estimated
    assert (Usage(1, 2) + Usage(3, 4, estimated=True)).estimated
    assert not (Usage(1, 2) + Usage(3, 4)).estimated
    with pytest.raises(InvalidResponse, match="estimated must be a bool"):
        Usage(1, 2, estimated=1)  # type: ignore[arg-type]
    # Reported usage keeps its old wire form; an estimate says so.
    assert '"estimated"' not in to_json(Usage(1, 2))
    marked = to_json(Usage(1, 2, estimated=True))
    assert '"estimated":true' in marked.replace(" ", "")
    assert from_json(marked, Usage) == Usage(1, 2, estimated=True)


class WordCounter:
    """A whitespace tokenizer, enough to see which texts are counted."""

    def __init__(self, fail_on: str | None = None) -> None:
        self.seen: list[str] = []
        self.fail_on = fail_on

    async def count_tokens(self, text: str) -> int:
        await trio.lowlevel.checkpoint()
        self.seen.append(text)
        if text == self.fail_on:
            raise ModelError("cannot count")
        return len(text.split())


async def test_a_counter_counts_the_joined_prompt_and_the_answer() -> None:
    counter = WordCounter()
    assert isinstance(counter, TokenCounter)
    request = GenerationRequest([Message.system("be brief"), Message.user("say three words")])
    usage = await count_usage(request, Response("one two three"), counter)
    assert counter.seen == ["be brief\nsay three words", "one two three"]
    assert usage == Usage(5 + 2 * 4, 3, estimated=True)


async def test_a_failing_counter_falls_back_to_bytes_for_that_half() -> None:
    request = GenerationRequest([Message.user("hello")])
    usage = await count_usage(request, Response("one two"), WordCounter(fail_on="hello"))
    assert usage == Usage(4 + 2, 2, estimated=True)
    usage = await count_usage(request, Response("one two"), WordCounter(fail_on="one two"))
    assert usage == Usage(4 + 1, 2, estimated=True)


async def test_a_counter_answering_nonsense_is_a_typed_error_then_bytes() -> None:
    class Negative:
        async def count_tokens(self, text: str) -> int:
            await trio.lowlevel.checkpoint()
            return -1

    usage = await count_usage(GenerationRequest([Message.user("hi")]), Response(""), Negative())
    assert usage == Usage(4 + 1, 0, estimated=True)
