"""The versioned JSON wire form of model-layer values."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex import SerializationError
from emelex.model import (
    WIRE_VERSION,
    AudioPart,
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    Message,
    Part,
    Progress,
    Reasoning,
    ReasoningDelta,
    Response,
    TextDelta,
    TextPart,
    ToolCall,
    ToolDefinition,
    Usage,
    VideoPart,
    from_json,
    structure,
    to_json,
    unstructure,
)
from emelex.testing import strategies as est

EVERY_VALUE = st.one_of(
    est.text_parts(),
    est.image_parts(),
    est.audio_parts(),
    est.video_parts(),
    est.tool_calls(),
    est.tool_definitions(),
    est.messages(),
    est.reasonings(),
    est.generation_options(),
    est.generation_requests(),
    est.text_deltas(),
    est.reasoning_deltas(),
    est.progress_events(),
    est.completed_events(),
    est.usages(),
    est.responses(),
    est.capabilities(),
)


@given(EVERY_VALUE)
def test_json_round_trip(value: Any) -> None:
    text = to_json(value)
    assert from_json(text, type(value)) == value
    envelope = json.loads(text)
    assert envelope["version"] == WIRE_VERSION
    assert envelope["type"] == type(value).__name__


@given(EVERY_VALUE)
def test_unstructure_round_trip(value: Any) -> None:
    data = unstructure(value)
    # Plain data survives a trip through the json module unchanged.
    assert json.loads(json.dumps(data)) == data
    assert structure(data, type(value)) == value


@given(est.parts())
def test_part_union_round_trip(part: Part) -> None:
    assert from_json(to_json(part), Part) == part
    assert structure(unstructure(part), Part) == part


@given(est.generation_events())
def test_event_union_round_trip(event: GenerationEvent) -> None:
    assert from_json(to_json(event), GenerationEvent) == event


@given(st.lists(est.messages(), max_size=4).map(tuple))
def test_history_round_trip_through_structure(history: tuple[Message, ...]) -> None:
    data = unstructure(history, tuple[Message, ...])
    assert isinstance(data, list)
    assert structure(data, tuple[Message, ...]) == history


GOLDEN_MESSAGE = (
    '{"version":1,"type":"Message","data":{"role":"assistant",'
    '"content":[{"type":"text","text":"Reading it."}],'
    '"tool_calls":[{"id":"call_0","name":"read_file","arguments":{"path":"notes.txt"}}],'
    '"reasoning":"Need the file."}}'
)


def test_golden_message_with_tool_calls() -> None:
    message = Message(
        "assistant",
        "Reading it.",
        tool_calls=[ToolCall("call_0", "read_file", {"path": "notes.txt"})],
        reasoning="Need the file.",
    )
    assert to_json(message) == GOLDEN_MESSAGE
    assert from_json(GOLDEN_MESSAGE, Message) == message


def test_golden_request() -> None:
    request = GenerationRequest(
        [
            Message.system("Be brief."),
            Message.user(["What is this?", ImagePart(b"\x89PNG", "image/png")]),
            Message.tool("c1", "ok"),
        ],
        tools=[ToolDefinition("now", "Current time", {"type": "object"})],
        options=GenerationOptions(max_tokens=64, reasoning=Reasoning.budget(256)),
    )
    expected = {
        "version": 1,
        "type": "GenerationRequest",
        "data": {
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image", "data": "iVBORw==", "mime_type": "image/png"},
                    ],
                },
                {
                    "role": "tool",
                    "content": [{"type": "text", "text": "ok"}],
                    "tool_call_id": "c1",
                },
            ],
            "options": {"max_tokens": 64, "reasoning": {"mode": "budget", "budget_tokens": 256}},
            "tools": [
                {"name": "now", "description": "Current time", "parameters": {"type": "object"}}
            ],
        },
    }
    assert json.loads(to_json(request)) == expected


def test_golden_events_and_small_values() -> None:
    assert unstructure(TextDelta("Hel")) == {"type": "text_delta", "text": "Hel"}
    assert unstructure(ReasoningDelta("hm")) == {"type": "reasoning_delta", "text": "hm"}
    assert unstructure(Progress("prompt", 3, 10)) == {
        "type": "progress",
        "stage": "prompt",
        "completed": 3,
        "total": 10,
    }
    assert unstructure(Completed(Response("hi", usage=Usage(4, 2)))) == {
        "type": "completed",
        "response": {
            "text": "hi",
            "usage": {"input_tokens": 4, "output_tokens": 2},
            "finish_reason": "stop",
        },
    }
    assert unstructure(AudioPart(b"\x00\x01", "audio/wav")) == {
        "type": "audio",
        "data": "AAE=",
        "mime_type": "audio/wav",
    }
    assert unstructure(VideoPart(b"", "video/mp4"))["type"] == "video"
    assert unstructure(Reasoning.OFF) == {"mode": "off"}
    assert unstructure(Reasoning.AUTO) == {"mode": "auto"}
    assert unstructure(GenerationOptions()) == {}
    assert unstructure(Capabilities.unknown()) == {}
    assert unstructure(Capabilities(tool_history=False)) == {"tool_history": False}


def test_to_json_is_compact_and_keeps_unicode() -> None:
    text = to_json(TextPart("héllo ✓"))
    assert text == '{"version":1,"type":"TextPart","data":{"type":"text","text":"héllo ✓"}}'


def test_from_json_accepts_bytes() -> None:
    assert from_json(to_json(Usage(1, 2)).encode(), Usage) == Usage(1, 2)


def _envelope(type_name: str, data: Any, version: Any = 1) -> str:
    return json.dumps({"version": version, "type": type_name, "data": data})


MESSAGE_DATA: dict[str, Any] = json.loads(GOLDEN_MESSAGE)["data"]

MALFORMED: list[tuple[str, Any]] = [
    ("", Message),
    ("not json", Message),
    ("[1, 2]", Message),
    ('{"version": 1, "type": "Message"}', Message),
    ('{"version": 1, "type": "Message", "data": {}, "extra": 1}', Message),
    (_envelope("Message", MESSAGE_DATA, version=2), Message),
    (_envelope("Message", MESSAGE_DATA, version="1"), Message),
    (_envelope("Message", MESSAGE_DATA, version=True), Message),
    (_envelope("Response", MESSAGE_DATA), Message),
    (_envelope("Nope", MESSAGE_DATA), Message),
    (_envelope("Message", [MESSAGE_DATA]), Message),
    (_envelope("Message", {**MESSAGE_DATA, "role": "robot"}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "role": "user"}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "unknown": 1}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "content": "text"}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "content": [{"type": "blob"}]}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "content": [{"text": "no tag"}]}), Message),
    (_envelope("Message", {**MESSAGE_DATA, "content": [{"type": "text", "text": 5}]}), Message),
    (
        _envelope("Message", {**MESSAGE_DATA, "content": [{"type": "text", "text": "", "x": 1}]}),
        Message,
    ),
    (_envelope("Message", {**MESSAGE_DATA, "tool_calls": [{"id": "c", "name": "t"}]}), Message),
    (
        _envelope(
            "Message", {**MESSAGE_DATA, "tool_calls": [{"id": "c", "name": "t", "arguments": []}]}
        ),
        Message,
    ),
    (_envelope("Message", {k: v for k, v in MESSAGE_DATA.items() if k != "role"}), Message),
    (_envelope("Usage", {"input_tokens": "1"}), Usage),
    (_envelope("Usage", {"input_tokens": 1.0}), Usage),
    (_envelope("Usage", {"input_tokens": True}), Usage),
    (_envelope("Usage", {"input_tokens": -1}), Usage),
    ('{"version": 1, "type": "Usage", "data": {"input_tokens": NaN}}', Usage),
    (_envelope("GenerationOptions", {"temperature": "hot"}), GenerationOptions),
    (_envelope("GenerationOptions", {"temperature": 3}), GenerationOptions),
    (_envelope("GenerationOptions", {"reasoning": {"mode": "budget"}}), GenerationOptions),
    (_envelope("GenerationOptions", {"reasoning": "auto"}), GenerationOptions),
    (_envelope("GenerationOptions", {"stop": "x"}), GenerationOptions),
    (_envelope("ImagePart", {"type": "image", "data": "%%%", "mime_type": "image/png"}), ImagePart),
    (_envelope("ImagePart", {"type": "audio", "data": "", "mime_type": "image/png"}), ImagePart),
    (_envelope("ImagePart", {"type": "image", "data": "", "mime_type": "text/x"}), ImagePart),
    (_envelope("TextDelta", {"type": "text_delta"}), GenerationEvent),
    (_envelope("Capabilities", {"system_prompt": "yes"}), Capabilities),
    (_envelope("Capabilities", {"system_prompt": 1}), Capabilities),
    (_envelope("Progress", {"type": "progress", "stage": "x", "completed": 5, "total": 1}), Part),
    (_envelope("GenerationRequest", {"messages": []}), GenerationRequest),
    (_envelope("Reasoning", {"mode": "off", "budget_tokens": 5}), Reasoning),
]


@pytest.mark.parametrize(("text", "cls"), MALFORMED)
def test_malformed_input_raises_serialization_error(text: str, cls: Any) -> None:
    with pytest.raises(SerializationError):
        from_json(text, cls)


def test_decoding_errors_are_chained_and_name_the_path() -> None:
    bad = _envelope(
        "Message", {**MESSAGE_DATA, "tool_calls": [MESSAGE_DATA["tool_calls"][0], {"id": 1}]}
    )
    with pytest.raises(SerializationError, match=r"tool_calls\[1\]") as info:
        from_json(bad, Message)
    assert info.value.__cause__ is not None


def test_wrong_version_names_the_versions() -> None:
    with pytest.raises(SerializationError, match="version 7"):
        from_json(_envelope("Usage", {}, version=7), Usage)


@given(st.text())
def test_arbitrary_text_never_escapes_as_another_error(text: str) -> None:
    with contextlib.suppress(SerializationError):
        from_json(text, Message)


@given(est.json_values())
def test_arbitrary_data_never_escapes_as_another_error(data: Any) -> None:
    for cls in (Message, GenerationRequest, Completed, GenerationEvent, Part):
        with contextlib.suppress(SerializationError):
            from_json(json.dumps({"version": 1, "type": "Message", "data": data}), cls)
        with contextlib.suppress(SerializationError):
            structure(data, cls)


def test_unencodable_values_raise_serialization_error() -> None:
    with pytest.raises(SerializationError):
        to_json(object())
    with pytest.raises(SerializationError):
        to_json({"role": "user"})
    with pytest.raises(SerializationError):
        to_json(ToolCall("c", "t", {"x": float("nan")}))
    with pytest.raises(SerializationError):
        to_json(ToolCall("c", "t", {"x": {1, 2}}))


def test_unknown_target_type_raises_serialization_error() -> None:
    with pytest.raises(SerializationError):
        from_json(to_json(Usage()), dict)


def test_unset_reasoning_is_omitted_and_restored() -> None:
    options = GenerationOptions(seed=1)
    assert "reasoning" not in unstructure(options)
    assert from_json(to_json(options), GenerationOptions).reasoning is options.reasoning
