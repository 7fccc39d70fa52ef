"""pydantic-ai on Temporal (``pydantic_ai.durable_exec.temporal``, ``pydantic-ai-slim[temporal]``):
one turn is one workflow running an ``Agent`` with the ``TemporalDurability`` capability
whose ``FunctionModel`` (in the model-request activity) returns one `noop` call, then the
text "done"; the async `noop` tool runs as its tool-call activity: 2 model activities + 1
tool activity.

Run with the Temporal benchmark venv:
``/work/bench-venv-temporal/bin/python pydantic_ai_temporal_turn.py [--address host:port]``.
"""
# mypy: ignore-errors
# (pydantic-ai is installed only in the Temporal benchmark venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
import sys
import uuid
from typing import Any

from _common import report, run, time_turns
from _temporal_common import activities_run, connect, dev_server, parse_args
from temporalio import workflow
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from pydantic_ai import Agent
    from pydantic_ai.durable_exec.temporal import (
        PydanticAIPlugin,
        PydanticAIWorkflow,
        TemporalDurability,
    )
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


agent: Any = Agent(FunctionModel(scripted), name="bench", capabilities=[TemporalDurability()])


@agent.tool_plain
async def noop() -> str:
    """Does nothing."""
    return "ok"


@workflow.defn(name="benchmark.pydantic_ai_turn")
class AgentTurn(PydanticAIWorkflow):
    __pydantic_ai_agents__ = (agent,)

    @workflow.run
    async def run(self, prompt: str) -> list[Any]:
        result = await agent.run(prompt)
        rounds = sum(isinstance(m, ModelResponse) for m in result.all_messages())
        return [result.output, rounds]


async def main() -> None:
    args = parse_args()
    with dev_server(args) as address:
        client = await connect(address, plugins=[PydanticAIPlugin()])
        async with Worker(client, task_queue=args.task_queue, workflows=[AgentTurn]):

            async def turn(workflow_id: str | None = None) -> list[Any]:
                return await client.execute_workflow(
                    AgentTurn.run,
                    "hi",
                    id=workflow_id or f"pa-{uuid.uuid4()}",
                    task_queue=args.task_queue,
                )

            check = f"pa-check-{uuid.uuid4()}"
            answer, rounds = await turn(check)
            assert (answer, rounds) == ("done", 2), (answer, rounds)
            scheduled = await activities_run(client, check)
            assert len(scheduled) == 3, scheduled
            assert scheduled[1].endswith("call_tool"), scheduled
            print(f"activities of one turn: {scheduled}", file=sys.stderr)
            timing = await time_turns(turn, args.turns, args.warmup)
    report("pydantic-ai on Temporal", importlib.metadata.version("pydantic-ai-slim"), timing)


if __name__ == "__main__":
    run(main)
