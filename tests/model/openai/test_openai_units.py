"""Pure parts of the OpenAI-compatible backend: SSE parsing, chunk assembly, request
mapping, Retry-After and configuration checks (no I/O)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import (
    AgentModel,
    AudioPart,
    Capabilities,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    InvalidRequest,
    Message,
    Reasoning,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    Usage,
    VideoPart,
)
from emelex.model.openai import (
    ChunkAssembler,
    ChunkTooLarge,
    MalformedChunk,
    MalformedToolCall,
    OpenAIModel,
    SSEEvent,
    SSEParser,
    StreamError,
    UnsupportedContent,
    audio_format,
    reasoning_effort_fields,
    request_body,
    retry_after_seconds,
)


# -- SSE ------------------------------------------------------------------------------------
def parse(data: bytes, max_line: int = 1 << 16) -> list[SSEEvent]:
    parser = SSEParser(max_line)
    return parser.feed(data) + parser.finish()


def test_sse_events_fields_and_comments() -> None:
    data = (
        b": keep-alive\n"
        b"id: 7\nretry: 10\ndata: one\n\n"
        b"event: error\ndata: two\ndata:three\n\n"
        b"data\n\n"  # a field without a colon: empty data
        b"\n\n"  # blank lines alone dispatch nothing
    )
    assert parse(data) == [
        SSEEvent("one"),
        SSEEvent("two\nthree", "error"),
        SSEEvent(""),
    ]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n", b"\r"])
def test_sse_line_endings(newline: bytes) -> None:
    data = b"data: a" + newline + newline + b"data: b" + newline + newline
    assert parse(data) == [SSEEvent("a"), SSEEvent("b")]


def test_sse_bom_and_unterminated_event() -> None:
    parser = SSEParser(100)
    assert parser.feed(b"\xef\xbb") == []
    assert parser.feed(b"\xbfdata: x\n\ndata: dropped\n") == [SSEEvent("x")]
    assert parser.finish() == []


def test_sse_trailing_cr_ends_the_event_at_eof() -> None:
    parser = SSEParser(100)
    assert parser.feed(b"data: x\r\n\r") == []
    assert parser.finish() == [SSEEvent("x")]


def test_sse_line_limit_without_newline() -> None:
    parser = SSEParser(16)
    parser.feed(b"data: 0123456789")
    with pytest.raises(ChunkTooLarge) as caught:
        parser.feed(b"abc")
    assert (caught.value.limit, caught.value.maximum, caught.value.actual) == (
        "max_line_bytes",
        16,
        19,
    )


def test_sse_line_limit_within_one_piece() -> None:
    with pytest.raises(ChunkTooLarge):
        SSEParser(16).feed(b"data: " + b"x" * 20 + b"\n\n")


def test_sse_event_limit_over_many_lines() -> None:
    parser = SSEParser(32)
    with pytest.raises(ChunkTooLarge):
        parser.feed(b"data: 0123456789\n" * 4)


def test_sse_rejects_non_utf8() -> None:
    with pytest.raises(MalformedChunk):
        SSEParser(100).feed(b"data: \xff\xfe\n\n")


_line_end = st.sampled_from([b"\n", b"\r\n", b"\r"])
_value = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=20)


@given(
    events=st.lists(st.tuples(st.lists(_value, min_size=1, max_size=3), _line_end), max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_sse_any_split_gives_the_same_events(
    events: list[tuple[list[str], bytes]], cuts: list[int]
) -> None:
    data = b""
    for lines, end in events:
        for line in lines:
            data += b"data: " + line.encode() + end
        data += end
    expected = [SSEEvent("\n".join(lines)) for lines, _ in events]
    assert parse(data) == expected
    parser = SSEParser(1 << 16)
    got: list[SSEEvent] = []
    start = 0
    for cut in sorted(c for c in cuts if c <= len(data)):
        got += parser.feed(data[start:cut])
        start = cut
    got += parser.feed(data[start:])
    got += parser.finish()
    assert got == expected


# -- chunk assembly ---------------------------------------------------------------------------
def delta(value: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"choices": [{"index": index, "delta": value, "finish_reason": finish}]}


def call_piece(index: int | None = None, **fields: Any) -> dict[str, Any]:
    piece: dict[str, Any] = {} if index is None else {"index": index}
    function = {k: fields.pop(k) for k in ("name", "arguments") if k in fields}
    if function:
        piece["function"] = function
    piece.update(fields)
    return delta({"tool_calls": [piece]})


def test_assembly_text_reasoning_and_alternate_reasoning_field() -> None:
    assembler = ChunkAssembler()
    events = assembler.feed_chunk(delta({"content": "a", "reasoning_content": "r1"}))
    events += assembler.feed_chunk(delta({"reasoning": "r2"}))
    events += assembler.feed_chunk(delta({"reasoning_content": "r3", "reasoning": "dup"}))
    events += assembler.feed_chunk(delta({"content": ""}))
    assert events == [
        TextDelta("a"),
        ReasoningDelta("r1"),
        ReasoningDelta("r2"),
        ReasoningDelta("r3"),
    ]
    response = assembler.response()
    assert (response.text, response.reasoning, response.finish_reason) == ("a", "r1r2r3", "stop")


def test_assembly_other_choices_and_usage_only_chunks() -> None:
    assembler = ChunkAssembler()
    assert assembler.feed_chunk(delta({"content": "ignored"}, index=1)) == []
    assert assembler.feed_chunk({"choices": [], "usage": {"prompt_tokens": 2}}) == []
    assert assembler.response().usage == Usage(2, 0)


def test_assembly_calls_without_index_and_repeated_names() -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(call_piece(id="a", name="first", arguments='{"x"'))
    assembler.feed_chunk(call_piece(name="first", arguments=": 1}"))  # continues the last
    assembler.feed_chunk(call_piece(id="b", name="second"))
    assembler.feed_chunk(call_piece(id="a", arguments=""))  # named by id
    assembler.feed_chunk(delta({}, finish="stop"))
    response = assembler.response()
    assert response.tool_calls == (ToolCall("a", "first", {"x": 1}), ToolCall("b", "second", {}))
    assert response.finish_reason == "tool_calls"  # calls turn "stop" into "tool_calls"


def test_assembly_parsed_arguments_and_missing_id() -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(call_piece(3, name="f", arguments={"k": [1]}))
    assert assembler.response().tool_calls == (ToolCall("call_3", "f", {"k": [1]}),)


def test_assembly_name_pieces_are_joined() -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(call_piece(0, id="c", name="read_"))
    assembler.feed_chunk(call_piece(0, name="file"))
    assert assembler.response().tool_calls[0].name == "read_file"


def test_assembly_call_without_a_name_is_malformed() -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(call_piece(0, id="c", arguments="{}"))
    with pytest.raises(MalformedToolCall, match="no function name"):
        assembler.response()


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ("[1, 2]", "were a JSON array, not a JSON object"),
        ('"text"', "were a JSON string, not a JSON object"),
        ('{"a": ', "were not valid JSON"),
        ("[" * 100_000, "were nested too deeply to parse"),
    ],
)
def test_assembly_unparsable_arguments_are_handed_on(arguments: str, why: str) -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(call_piece(0, id="c", name="f", arguments=arguments))
    (call,) = assembler.response().tool_calls
    assert (call.id, call.name, call.arguments) == ("c", "f", {})
    assert call.arguments_error is not None and why in call.arguments_error
    # The model sees a bounded excerpt of what it sent, quoted as JSON.
    assert json.dumps(arguments[:20])[:-1] in call.arguments_error
    assert len(call.arguments_error) < 400


def test_assembly_cancelled_drops_calls() -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(delta({"content": "so far"}))
    assembler.feed_chunk(call_piece(0, id="c", name="f", arguments='{"a": '))
    response = assembler.response(cancelled=True)
    assert (response.text, response.tool_calls, response.finish_reason) == (
        "so far",
        (),
        "cancelled",
    )


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("length", "length"),
        ("content_filter", "error"),
        ("function_call", "tool_calls"),
        ("eos", "stop"),
    ],
)
def test_assembly_finish_reasons(reason: str, expected: str) -> None:
    assembler = ChunkAssembler()
    assembler.feed_chunk(delta({}, finish=reason))
    assert assembler.response().finish_reason == expected
    assert assembler.finish_reason == reason


@pytest.mark.parametrize(
    "chunk",
    [
        [1, 2],
        {"choices": {"index": 0}},
        {"choices": ["x"]},
        delta("text"),  # type: ignore[arg-type]
        delta({"content": 1}),
        delta({"reasoning_content": ["x"]}),
        delta({"tool_calls": {"index": 0}}),
        delta({"tool_calls": ["x"]}),
        delta({"tool_calls": [{"index": -1}]}),
        delta({"tool_calls": [{"index": 0, "id": 5}]}),
        delta({"tool_calls": [{"index": 0, "function": "f"}]}),
        delta({"tool_calls": [{"index": 0, "function": {"name": 1}}]}),
        delta({"tool_calls": [{"index": 0, "function": {"arguments": 1}}]}),
        {"choices": [{"index": 0, "delta": {}, "finish_reason": 3}]},
        {"usage": {"prompt_tokens": -1}},
        {"usage": {"prompt_tokens": 1.5}},
        {"usage": "many"},
    ],
)
def test_assembly_malformed_chunks(chunk: Any) -> None:
    with pytest.raises(MalformedChunk):
        ChunkAssembler().feed_chunk(chunk)


def test_assembly_error_chunks_and_bad_json() -> None:
    with pytest.raises(StreamError, match="overloaded"):
        ChunkAssembler().feed_chunk({"error": {"message": "overloaded"}})
    with pytest.raises(StreamError, match="plain"):
        ChunkAssembler().feed_chunk({"error": "plain"})
    with pytest.raises(MalformedChunk, match="not valid JSON"):
        ChunkAssembler().feed_data("{")


def test_assembly_whole_completion() -> None:
    assembler = ChunkAssembler()
    body = {
        "choices": [{"index": 0, "message": {"content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    assert assembler.feed_completion(body) == [TextDelta("hi")]
    assert assembler.response().usage == Usage(1, 1)
    with pytest.raises(MalformedChunk):
        ChunkAssembler().feed_completion({"choices": []})
    with pytest.raises(MalformedChunk):
        ChunkAssembler().feed_completion({"choices": [{"index": 0}]})


# -- request mapping ----------------------------------------------------------------------------
def test_user_media_parts() -> None:
    message = Message.user(
        [
            "look",
            ImagePart(b"\x89PNG", "image/png"),
            AudioPart(b"RIFF", "audio/x-wav"),
            AudioPart(b"ID3", "audio/mpeg"),
            AudioPart(b"fLaC", "audio/flac"),
        ]
    )
    body = request_body(GenerationRequest([message]), "m")
    content = body["messages"][0]["content"]
    assert content[0] == {"type": "text", "text": "look"}
    assert content[1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw=="},
    }
    assert content[2] == {
        "type": "input_audio",
        "input_audio": {"data": "UklGRg==", "format": "wav"},
    }
    assert [part["input_audio"]["format"] for part in content[3:]] == ["mp3", "flac"]
    assert audio_format("audio/x-aiff") == "aiff"


@pytest.mark.parametrize(
    "message",
    [
        Message.user([VideoPart(b"v", "video/mp4")]),
        Message("system", [ImagePart(b"i", "image/png")]),
        Message.tool("c", [ImagePart(b"i", "image/png")]),
        Message.assistant([AudioPart(b"a", "audio/wav")]),
    ],
)
def test_unsupported_content(message: Message) -> None:
    with pytest.raises(UnsupportedContent) as caught:
        request_body(GenerationRequest([message]), "m")
    assert isinstance(caught.value, InvalidRequest)


def test_assistant_messages_and_reasoning_history() -> None:
    history = [
        Message.user("q"),
        Message.assistant("text", reasoning="thought"),
        Message.assistant("", tool_calls=[ToolCall("c", "f", {"ü": 1})]),
    ]
    plain = request_body(GenerationRequest(history), "m")["messages"]
    assert plain[1] == {"role": "assistant", "content": "text"}
    assert plain[2]["content"] == ""
    assert plain[2]["tool_calls"] == [
        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"ü": 1}'}}
    ]
    kept = request_body(GenerationRequest(history), "m", send_reasoning=True)["messages"]
    assert kept[1]["reasoning_content"] == "thought"
    model = OpenAIModel(
        "http://127.0.0.1:1/v1", "m", capabilities=Capabilities(reasoning_history=True)
    )
    assert model.request_body(GenerationRequest(history))["messages"][1]["reasoning_content"]


def test_options_and_reasoning_mapping() -> None:
    def with_options(**options: Any) -> dict[str, Any]:
        request = GenerationRequest([Message.user("q")], options=GenerationOptions(**options))
        return request_body(request, "m", include_usage=False)

    bare = with_options()
    assert bare == {"model": "m", "messages": [{"role": "user", "content": "q"}], "stream": True}
    assert with_options(reasoning=Reasoning.OFF)["reasoning_effort"] == "none"
    assert "reasoning_effort" not in with_options(reasoning=Reasoning.AUTO)
    assert with_options(reasoning=Reasoning.budget(1024))["reasoning_effort"] == "low"
    assert with_options(reasoning=Reasoning.budget(4096))["reasoning_effort"] == "medium"
    assert with_options(reasoning=Reasoning.budget(20000))["reasoning_effort"] == "high"
    assert reasoning_effort_fields(Reasoning.AUTO) == {}


def test_custom_reasoning_fields_and_extra_body() -> None:
    def toggle(reasoning: Reasoning) -> dict[str, Any]:
        return {"chat_template_kwargs": {"enable_thinking": reasoning.enabled}}

    request = GenerationRequest(
        [Message.user("q")], options=GenerationOptions(reasoning=Reasoning.OFF)
    )
    body = request_body(
        request, "m", reasoning_fields=toggle, extra_body={"stream_options": None, "n": 1}
    )
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["stream_options"] is None and body["n"] == 1


# -- Retry-After --------------------------------------------------------------------------------
def test_retry_after_forms() -> None:
    def headers(**values: str) -> httpx.Headers:
        return httpx.Headers({k.replace("_", "-"): v for k, v in values.items()})

    assert retry_after_seconds(headers(retry_after="2.5")) == 2.5
    assert retry_after_seconds(headers(retry_after_ms="1500", retry_after="9")) == 1.5
    assert retry_after_seconds(headers(retry_after_ms="nan", retry_after="9")) == 9.0
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    text = format_datetime(moment, usegmt=True)
    assert retry_after_seconds(headers(retry_after=text), now=moment.timestamp() - 30) == 30.0
    assert retry_after_seconds(headers(retry_after="soon")) is None
    assert retry_after_seconds(headers(retry_after="-3")) is None
    assert retry_after_seconds(headers()) is None


# -- configuration -------------------------------------------------------------------------------
def as_agent_model(model: OpenAIModel) -> AgentModel:
    return model  # checked statically by mypy: OpenAIModel satisfies the protocol


def test_model_configuration_and_repr() -> None:
    model = OpenAIModel("https://user:pw@api.example/v1/", "gpt", api_key="sk-very-secret")
    assert isinstance(as_agent_model(model), AgentModel)
    assert model.capabilities == Capabilities.unknown()
    assert model.endpoint == "https://user:pw@api.example/v1/chat/completions"
    shown = repr(model)
    assert "sk-very-secret" not in shown and "pw" not in shown and "<redacted>" in shown
    assert "sk-very-secret" not in repr(vars(model))


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        (("ftp://host/v1", "m"), {}),
        (("not a url", "m"), {}),
        (("http://host/v1?x=1", "m"), {}),
        (("http://host/v1", ""), {}),
        (("http://host/v1", "m"), {"api_key": "a\nb"}),
        (("http://host/v1", "m"), {"api_key": ""}),
        (("http://host/v1", "m"), {"capabilities": {}}),
        (("http://host/v1", "m"), {"http_client": object()}),
        (("http://host/v1", "m"), {"max_line_bytes": 0}),
        (("http://host/v1", "m"), {"max_response_bytes": True}),
        (("http://host/v1", "m"), {"stall_timeout": 0}),
        (("http://host/v1", "m"), {"connect_timeout": None}),
        (("http://host/v1", "m"), {"headers": {"x": 1}}),
        (("http://host/v1", "m"), {"reasoning_fields": "no"}),
    ],
)
def test_model_rejects_bad_configuration(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequest):
        OpenAIModel(*args, **kwargs)


def test_generate_checks_its_arguments() -> None:
    model = OpenAIModel("http://127.0.0.1:1/v1", "m")
    with pytest.raises(InvalidRequest):
        model.generate("hello")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        model.generate(GenerationRequest([Message.user("q")]), cancellation=object())  # type: ignore[arg-type]


def test_body_is_json_serializable() -> None:
    request = GenerationRequest([Message.user("q")], options=GenerationOptions(stop="END"))
    assert json.loads(json.dumps(request_body(request, "m")))["stop"] == ["END"]
