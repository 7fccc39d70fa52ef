"""pydantic-ai: FunctionModel returns one `noop` tool call, then the text "done".

Run with the benchmark venv: ``/work/bench-venv/bin/python pydantic_ai_turn.py``.
"""
# mypy: ignore-errors
# (pydantic-ai is installed only in the benchmark venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
from typing import Any

from _common import parse_args, report, run, time_turns
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel


async def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # Round 1 (no tool result yet): call the tool. Round 2: answer.
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in last.parts):
        return ModelResponse(parts=[TextPart("done")])
    return ModelResponse(parts=[ToolCallPart("noop", {})])


agent: Any = Agent(FunctionModel(scripted))


@agent.tool_plain
async def noop() -> str:
    """Does nothing."""
    return "ok"


async def turn() -> None:
    result = await agent.run("hi")
    assert result.output == "done", result.output


async def main() -> None:
    args = parse_args()
    result = await agent.run("hi")
    rounds = sum(isinstance(m, ModelResponse) for m in result.all_messages())
    assert rounds == 2, result.all_messages()
    timing = await time_turns(turn, args.turns, args.warmup)
    report("pydantic-ai", importlib.metadata.version("pydantic-ai-slim"), timing)


if __name__ == "__main__":
    run(main)
