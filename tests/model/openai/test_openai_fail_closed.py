"""Fail-closed checks over a real HTTP server on loopback: an unknown thinking toggle
refuses reasoning before any request is sent, and a tool's video output never reaches
the server."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentSession, CapabilityMissing
from emelex.model import (
    Capabilities,
    Client,
    GenerationOptions,
    Reasoning,
    TextPart,
    ToolDefinition,
    VideoPart,
)
from emelex.model.openai import OpenAIModel
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

from .fault_server import FaultServer


class VideoEcho:
    """``echo`` that answers with an encoded video part."""

    definition = ToolDefinition("echo", "echo", {"type": "object"})
    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput((TextPart("clip:"), VideoPart(b"\x00\x01", "video/mp4")))


def builder(model: OpenAIModel, workspace: Path) -> Any:
    return (
        AgentSession.builder(Client(model), workspace)
        .include_file_tools(False)
        .include_shell_tool(False)
    )


async def test_unknown_thinking_toggle_fails_before_the_request(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    thinking = GenerationOptions(reasoning=Reasoning.budget(32))
    async with OpenAIModel(fault_server.url("text"), "m") as model:
        with pytest.raises(CapabilityMissing, match="not proven"):
            builder(model, tmp_path).options(thinking).build()
        with builder(model, tmp_path).build() as session, trio.fail_after(20):
            with pytest.raises(CapabilityMissing, match="not proven"):
                await session.run("think", options=thinking)
            assert session.history == ()
    assert fault_server.app.requests == []
    proven = Capabilities(thinking_toggle=True)
    async with OpenAIModel(fault_server.url("text"), "m", capabilities=proven) as model:
        with builder(model, tmp_path).options(thinking).build() as session, trio.fail_after(20):
            await session.run("think")
    assert len(fault_server.app.requests) == 1


async def test_tool_video_never_reaches_the_server(
    fault_server: FaultServer, tmp_path: Path
) -> None:
    async with OpenAIModel(fault_server.url("agent"), "m") as model:
        with builder(model, tmp_path).tool(VideoEcho()).build() as session, trio.fail_after(20):
            turn = await session.run("please echo hi")
    second = fault_server.app.requests[1]["messages"]
    assert second[-1]["role"] == "tool"
    assert "returned a video part" in str(second[-1]["content"])
    assert "video/mp4" not in str(fault_server.app.requests)
    assert "returned a video part" in turn.response.text
