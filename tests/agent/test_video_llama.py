"""Video fails closed with the native backend (real llama.cpp, a tiny random-weight GGUF):
a forced call to a tool that returns video reaches the next round as an error result, and
a resumed history holding video never reaches the model."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentSession, RoundLimitExceeded, UnsupportedContent
from emelex.model import (
    Client,
    GenerationOptions,
    Message,
    Reasoning,
    TextPart,
    ToolChoice,
    ToolDefinition,
    VideoPart,
)
from emelex.model.llama import LlamaModel, choose_extra_buffers, write_tiny_gguf
from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

VIDEO = VideoPart(b"\x00\x00\x00\x18ftypmp42", "video/mp4")


class Clip:
    definition = ToolDefinition(
        "clip",
        "returns a clip",
        {"type": "object", "properties": {}, "additionalProperties": False},
    )
    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput((TextPart("clip"), VIDEO))


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trio.run(choose_extra_buffers)  # the buffer verdict, outside any test time limit
    return write_tiny_gguf(tmp_path_factory.mktemp("video") / "tiny.gguf")


@pytest.fixture
async def tiny(tiny_path: Path) -> AsyncIterator[LlamaModel]:
    async with LlamaModel(tiny_path, n_threads=1, n_threads_batch=1) as model:
        yield model


async def test_a_video_tool_result_never_reaches_llama(tiny: LlamaModel, tmp_path: Path) -> None:
    options = GenerationOptions(
        max_tokens=400,
        temperature=0.0,
        reasoning=Reasoning.OFF,
        tool_choice=ToolChoice.tool("clip"),
    )
    builder = (
        AgentSession.builder(Client(tiny), tmp_path)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tool(Clip())
        .options(options)
        .max_rounds(2)
    )
    with builder.build() as session, trio.fail_after(120):
        # Every round is forced to call clip, so the turn ends at the round limit after
        # the second round's request (built with the first result) reached llama.cpp;
        # the rounds whose tools ran are checkpointed.
        with pytest.raises(RoundLimitExceeded):
            await session.run("get the clip")
        history = session.history
    results = [m for m in history if m.role == "tool"]
    assert "returned a video part" in results[0].text  # later rounds: whatever the model did
    assert not any(isinstance(p, VideoPart) for m in history for p in m.content)


async def test_resumed_video_history_is_refused_before_llama(
    tiny: LlamaModel, tmp_path: Path
) -> None:
    history = [Message.user(["watch", VIDEO]), Message("assistant", "ok")]
    builder = AgentSession.builder(Client(tiny), tmp_path).history(history)
    with pytest.raises(UnsupportedContent, match="video"):
        builder.build()
