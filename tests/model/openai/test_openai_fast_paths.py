"""The OpenAI stream's fast paths (inlined ``data:`` lines, the direct JSON scanner)
decide exactly as the general paths do."""

from __future__ import annotations

import json

import attrs
import pytest

from emelex.model import ReasoningDelta, TextDelta
from emelex.model.openai import ChunkAssembler, ChunkTooLarge, MalformedChunk, SSEEvent, SSEParser
from emelex.model.openai._assembly import _loads


@pytest.mark.parametrize(
    "text",
    ['{"a": 1}', ' {"a": 1}', '{"a": 1}\n', '"s"', "[1, 2]", "1e5", "null", "NaN", '{"a":"é"}'],
)
def test_loads_agrees_with_json_loads(text: str) -> None:
    assert json.dumps(_loads(text)) == json.dumps(json.loads(text))  # NaN != NaN


@pytest.mark.parametrize("text", ['{"a": 1}x', "", "[1", "{'a': 1}", " "])
def test_loads_raises_what_json_loads_raises(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        _loads(text)


def test_a_chunk_with_extra_data_is_malformed() -> None:
    with pytest.raises(MalformedChunk):
        ChunkAssembler().feed_data('{"choices": []} {"choices": []}')


def test_choice_zero_found_when_not_first() -> None:
    assembler = ChunkAssembler()
    chunk = {"choices": [{"index": 1, "delta": {"content": "no"}}, {"delta": {"content": "yes"}}]}
    assert assembler.feed_chunk(chunk) == [TextDelta("yes")]
    assert assembler.text == "yes"


def test_data_lines_with_and_without_the_space_and_other_fields_mixed() -> None:
    parser = SSEParser(1000)
    stream = b"data: a\ndata:b\nevent: note\n: ping\ndata:  c\n\ndata: d\r\n\r\n"
    assert parser.feed(stream) == [SSEEvent("a\nb\n c", "note"), SSEEvent("d")]


def test_invalid_utf8_on_a_data_line_is_malformed() -> None:
    with pytest.raises(MalformedChunk):
        SSEParser(1000).feed(b"data: \xc3\x28\n\n")


def test_limit_is_checked_on_each_complete_line_of_a_piece() -> None:
    parser = SSEParser(20)
    assert parser.feed(b"data: short\n\n") == [SSEEvent("short")]
    with pytest.raises(ChunkTooLarge):
        parser.feed(b"data: short\n" + b"data: " + b"y" * 30 + b"\n")


def test_held_cr_then_lf_is_one_line_end() -> None:
    parser = SSEParser(100)
    assert parser.feed(b"data: x\r") == []
    assert parser.feed(b"\n\r") == []
    assert parser.feed(b"\n") == [SSEEvent("x")]


def test_streamed_deltas_are_the_same_frozen_values_as_validated_ones() -> None:
    # The assembler builds deltas without re-running the validator it already passed.
    events = ChunkAssembler().feed_chunk(
        {"choices": [{"delta": {"content": "tok", "reasoning_content": "why"}}]}
    )
    assert events == [TextDelta("tok"), ReasoningDelta("why")]
    assert [type(event) for event in events] == [TextDelta, ReasoningDelta]
    assert hash(events[0]) == hash(TextDelta("tok"))
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        events[0].text = "other"  # type: ignore[misc]
    with pytest.raises(MalformedChunk, match="not a string"):
        ChunkAssembler().feed_chunk({"choices": [{"delta": {"content": 5}}]})
