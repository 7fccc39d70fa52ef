"""Encoded video fails closed for every request: new input, resumed history and tool
output (``agent/_video.py``); the model never receives a video part."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import pytest
import trio

from emelex.agent import AgentSessionBuilder, UnsupportedContent
from emelex.agent._video import refuse_video, without_video
from emelex.model import Message, TextPart, ToolDefinition, VideoPart
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

Make = Callable[..., AgentSessionBuilder]
VIDEO = VideoPart(b"\x00\x00\x00\x18ftypmp42", "video/mp4")


class VideoTool:
    """A tool whose result carries an encoded video part next to its text."""

    definition = ToolDefinition("clip", "returns a clip", {"type": "object"})
    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput((TextPart("here is the clip"), VIDEO))


def test_resumed_history_with_video_is_refused_at_build(make_builder: Make) -> None:
    model = ScriptedModel([[Say("never")]])
    history = [Message.user(["watch", VIDEO]), Message("assistant", "ok")]
    builder = make_builder(model).history(history)
    with pytest.raises(UnsupportedContent, match="message 0 holds a video part"):
        builder.build()
    assert model.requests == ()


async def test_video_tool_output_becomes_an_error_and_never_reaches_the_model(
    make_builder: Make,
) -> None:
    model = ScriptedModel([[Call("clip", {})], [Say("no clip then")]])
    with make_builder(model).tool(VideoTool()).build() as session, trio.fail_after(10):
        turn = await session.run("get the clip")
    result = turn.messages[2]
    assert result.role == "tool" and "returned a video part" in result.text
    assert not any(isinstance(p, VideoPart) for m in session.history for p in m.content)
    for request in model.requests:
        assert not any(isinstance(p, VideoPart) for m in request.messages for p in m.content)
    assert turn.response.text == "no clip then"


def test_the_request_check_is_the_last_line() -> None:
    refuse_video([Message.user("fine")], "request")
    with pytest.raises(UnsupportedContent, match="request: message 1"):
        refuse_video([Message.user("a"), Message.user(["b", VIDEO])], "request")
    kept = ToolOutput("text only")
    assert without_video("t", kept) is kept
    replaced = without_video("t", ToolOutput((TextPart("x"), VIDEO)))
    assert replaced.is_error and "video" in replaced.text
