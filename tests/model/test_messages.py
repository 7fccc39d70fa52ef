"""Messages, content parts, tool calls, requests, events and capabilities."""

from __future__ import annotations

import contextlib
from typing import Any

import attrs
import pytest
from hypothesis import given

from emelex import EmelexError
from emelex.model import (
    AgentModel,
    AudioPart,
    Capabilities,
    Client,
    Completed,
    GenerationOptions,
    GenerationRequest,
    ImagePart,
    InvalidMessage,
    InvalidRequest,
    InvalidResponse,
    Message,
    ModelError,
    Progress,
    Response,
    TextPart,
    ToolCall,
    ToolDefinition,
    Usage,
    VideoPart,
    from_json,
    to_json,
)
from emelex.testing import strategies as est


def test_string_content_becomes_one_text_part() -> None:
    message = Message("user", "hello")
    assert message.content == (TextPart("hello"),)
    assert message.text == "hello"


def test_empty_string_content_is_empty_tuple() -> None:
    message = Message("assistant", "")
    assert message.content == ()
    assert message.text == ""


def test_sequence_content_is_stored_as_tuple_and_strings_become_parts() -> None:
    image = ImagePart(b"\x89PNG", "image/png")
    message = Message("user", ["look at ", image, TextPart("this")])
    assert message.content == (TextPart("look at "), image, TextPart("this"))
    assert isinstance(message.content, tuple)


def test_text_joins_text_parts_and_skips_media() -> None:
    message = Message("user", ["a", AudioPart(b"x", "audio/wav"), "b", TextPart("c")])
    assert message.text == "abc"


def test_tool_calls_are_stored_as_tuple() -> None:
    call = ToolCall("call_0", "read_file", {"path": "a.txt"})
    message = Message("assistant", "", tool_calls=[call])
    assert message.tool_calls == (call,)


@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_tool_calls_only_on_assistant(role: Any) -> None:
    call = ToolCall("c", "t", {})
    extra: dict[str, Any] = {"tool_call_id": "c"} if role == "tool" else {}
    with pytest.raises(InvalidMessage, match="tool_calls"):
        Message(role, "x", tool_calls=[call], **extra)


@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_reasoning_only_on_assistant(role: Any) -> None:
    extra: dict[str, Any] = {"tool_call_id": "c"} if role == "tool" else {}
    with pytest.raises(InvalidMessage, match="reasoning"):
        Message(role, "x", reasoning="hmm", **extra)


def test_tool_message_requires_tool_call_id() -> None:
    with pytest.raises(InvalidMessage, match="tool_call_id"):
        Message("tool", "result")
    with pytest.raises(InvalidMessage, match="tool_call_id"):
        Message("tool", "result", tool_call_id="")


@pytest.mark.parametrize("role", ["system", "user", "assistant"])
def test_tool_call_id_only_on_tool(role: Any) -> None:
    with pytest.raises(InvalidMessage, match="tool_call_id"):
        Message(role, "x", tool_call_id="c")


def test_unknown_role_rejected() -> None:
    with pytest.raises(InvalidMessage, match="role"):
        Message("robot", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="role"):
        Message(["user"], "x")  # type: ignore[arg-type]


@pytest.mark.parametrize("content", [3, None, [3], [b"bytes"], {"text": "x"}])
def test_bad_content_rejected(content: Any) -> None:
    with pytest.raises(InvalidMessage):
        Message("user", content)


def test_bad_tool_calls_rejected() -> None:
    with pytest.raises(InvalidMessage):
        Message("assistant", "", tool_calls=[{"id": "c"}])  # type: ignore[list-item]
    with pytest.raises(InvalidMessage):
        Message("assistant", "", tool_calls="call")  # type: ignore[arg-type]


def test_errors_belong_to_the_emelex_tree() -> None:
    with pytest.raises(ModelError):
        Message("tool", "x")
    assert issubclass(InvalidMessage, EmelexError)


def test_convenience_constructors() -> None:
    call = ToolCall("c1", "now", {})
    assert Message.system("rules") == Message("system", "rules")
    assert Message.user("hi") == Message("user", "hi")
    assert Message.assistant("ok", tool_calls=[call], reasoning="r") == Message(
        "assistant", "ok", tool_calls=(call,), reasoning="r"
    )
    assert Message.tool("c1", "12:00") == Message("tool", "12:00", tool_call_id="c1")


def test_messages_are_frozen() -> None:
    message = Message("user", "hi")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        message.role = "system"  # type: ignore[misc]


def test_media_parts_normalise_and_validate() -> None:
    assert ImagePart(bytearray(b"ab"), "IMAGE/PNG") == ImagePart(b"ab", "image/png")
    assert VideoPart(memoryview(b"v"), "video/mp4").data == b"v"
    with pytest.raises(InvalidMessage, match="image"):
        ImagePart(b"x", "audio/wav")
    with pytest.raises(InvalidMessage):
        AudioPart(b"x", "audio")
    with pytest.raises(InvalidMessage):
        AudioPart("not bytes", "audio/wav")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        TextPart(3)  # type: ignore[arg-type]


def test_media_repr_does_not_dump_bytes() -> None:
    assert "<1000 bytes>" in repr(ImagePart(b"\0" * 1000, "image/png"))


def test_tool_call_validation() -> None:
    assert ToolCall("c", "t", {"a": [1, {"b": None}]}).arguments == {"a": [1, {"b": None}]}
    with pytest.raises(InvalidMessage):
        ToolCall("", "t", {})
    with pytest.raises(InvalidMessage):
        ToolCall("c", "", {})
    with pytest.raises(InvalidMessage, match="JSON object"):
        ToolCall("c", "t", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="names"):
        ToolCall("c", "t", {1: "x"})  # type: ignore[dict-item]


def test_tool_definition_and_request_validation() -> None:
    tool = ToolDefinition("read_file", "Read a file", {"type": "object"})
    request = GenerationRequest([Message.user("hi")], tools=[tool])
    assert request.messages == (Message.user("hi"),)
    assert request.tools == (tool,)
    assert request.options == GenerationOptions()
    with pytest.raises(InvalidRequest, match="at least one"):
        GenerationRequest([])
    with pytest.raises(InvalidRequest):
        GenerationRequest(["hi"])  # type: ignore[list-item]
    with pytest.raises(InvalidRequest, match="twice"):
        GenerationRequest([Message.user("hi")], tools=[tool, tool])
    with pytest.raises(InvalidRequest):
        GenerationRequest([Message.user("hi")], options={"temperature": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        ToolDefinition("", "d", {})
    with pytest.raises(InvalidRequest):
        ToolDefinition("t", "d", "schema")  # type: ignore[arg-type]


def test_usage_adds_up() -> None:
    total = Usage(1, 2) + Usage(10, 20)
    assert total == Usage(11, 22)
    assert total.total_tokens == 33
    assert sum([Usage(1, 1), Usage(2, 2)], Usage()) == Usage(3, 3)
    with pytest.raises(InvalidResponse):
        Usage(-1, 0)
    with pytest.raises(InvalidResponse):
        Usage(True, 0)


def test_progress_validation() -> None:
    assert Progress("prompt", 3, 10).message is None
    assert Progress("load", 0).total is None
    with pytest.raises(InvalidResponse, match="exceeds"):
        Progress("prompt", 11, 10)
    with pytest.raises(InvalidResponse):
        Progress("", 1)
    with pytest.raises(InvalidResponse):
        Progress("prompt", -1)


def test_response_defaults_and_message() -> None:
    call = ToolCall("c", "t", {})
    response = Response("done", "why", [call], Usage(1, 2), "tool_calls")
    assert response.tool_calls == (call,)
    assert response.to_message() == Message(
        "assistant", "done", tool_calls=(call,), reasoning="why"
    )
    assert Response("x") == Response("x", None, (), Usage(), "stop")
    with pytest.raises(InvalidResponse):
        Response("x", finish_reason="done")  # type: ignore[arg-type]
    with pytest.raises(InvalidResponse):
        Completed("x")  # type: ignore[arg-type]


def test_capabilities() -> None:
    unknown = Capabilities.unknown()
    assert attrs.astuple(unknown) == (None,) * 5
    assert attrs.astuple(Capabilities.all_proven()) == (True,) * 5
    assert Capabilities(tool_history=False).tool_history is False
    with pytest.raises(InvalidRequest):
        Capabilities(system_prompt=1)  # type: ignore[arg-type]


class _Model:
    def __init__(self) -> None:
        self.capabilities = Capabilities.all_proven()
        self.context: Any = contextlib.nullcontext()
        self.seen: list[GenerationRequest] = []

    def generate(self, request: GenerationRequest) -> Any:
        self.seen.append(request)
        return self.context


def test_client_delegates_to_model() -> None:
    model = _Model()
    client = Client(model)
    assert isinstance(model, AgentModel)
    assert isinstance(client, AgentModel)
    assert client.model is model
    assert client.capabilities == Capabilities.all_proven()
    request = GenerationRequest([Message.user("hi")])
    assert client.generate(request) is model.context
    assert model.seen == [request]
    with pytest.raises(InvalidRequest):
        client.generate("hi")  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest, match="AgentModel"):
        Client(object())  # type: ignore[arg-type]


@given(est.messages())
def test_generated_messages_obey_role_rules(message: Message) -> None:
    if message.role != "assistant":
        assert message.tool_calls == ()
        assert message.reasoning is None
    assert (message.tool_call_id is not None) == (message.role == "tool")
    # Rebuilding from the fields yields an equal message.
    rebuilt = Message(
        message.role,
        message.content,
        tool_calls=message.tool_calls,
        tool_call_id=message.tool_call_id,
        reasoning=message.reasoning,
    )
    assert rebuilt == message


def test_a_tool_call_may_carry_why_its_arguments_did_not_parse() -> None:
    call = ToolCall("c", "f", {}, arguments_error="not valid JSON")
    assert call.arguments_error == "not valid JSON" and call.arguments == {}
    assert ToolCall("c", "f", {}).arguments_error is None
    bad: Any
    for bad in ("", 3):
        with pytest.raises(InvalidMessage, match="arguments_error"):
            ToolCall("c", "f", {}, arguments_error=bad)
    # Omitted from the wire form while unset; kept when set.
    assert "arguments_error" not in to_json(ToolCall("c", "f", {}))
    assert from_json(to_json(call), ToolCall) == call
