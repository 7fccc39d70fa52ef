"""openai-agents: a custom ``Model`` returns one `noop` function call, then a message "done".

Run with the benchmark venv: ``/work/bench-venv/bin/python openai_agents_turn.py``.
Tracing is disabled (it would otherwise try to export spans).
"""
# mypy: ignore-errors
# (openai-agents is installed only in the benchmark venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
import itertools
from collections.abc import AsyncIterator
from typing import Any

from _common import parse_args, report, run, time_turns
from agents import (
    Agent,
    Model,
    ModelResponse,
    RunConfig,
    Runner,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

_ids = itertools.count()


def _has_tool_result(items: Any) -> bool:
    if isinstance(items, str):
        return False
    return any(
        (item.get("type") if isinstance(item, dict) else getattr(item, "type", None))
        == "function_call_output"
        for item in items
    )


class ScriptedModel(Model):
    """Instant model: a function call first, a text message once the tool result is in."""

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        n = next(_ids)
        if _has_tool_result(input):
            output: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{n}",
                    content=[ResponseOutputText(annotations=[], text="done", type="output_text")],
                    role="assistant",
                    status="completed",
                    type="message",
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    arguments="{}", call_id=f"call_{n}", name="noop", type="function_call"
                )
            ]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
async def noop() -> str:
    """Does nothing."""
    return "ok"


set_tracing_disabled(True)
agent = Agent(name="bench", instructions=None, model=ScriptedModel(), tools=[noop])
config = RunConfig(tracing_disabled=True)


async def turn() -> None:
    result = await Runner.run(agent, "hi", run_config=config)
    assert result.final_output == "done", result.final_output


async def main() -> None:
    args = parse_args()
    result = await Runner.run(agent, "hi", run_config=config)
    assert len(result.raw_responses) == 2, result.raw_responses
    timing = await time_turns(turn, args.turns, args.warmup)
    report("openai-agents", importlib.metadata.version("openai-agents"), timing)


if __name__ == "__main__":
    run(main)
