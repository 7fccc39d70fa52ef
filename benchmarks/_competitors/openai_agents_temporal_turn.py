"""openai-agents on Temporal (``temporalio.openai_agents``, the ``temporalio[openai-agents]``
extra): one turn is one workflow whose ``Runner.run`` asks a scripted ``Model`` (in the
plugin's model activity) for a `noop` call, runs `noop` as an activity
(``activity_as_tool``), then gets the text "done": 2 model activities + 1 tool activity.

Run with the Temporal benchmark venv:
``/work/bench-venv-temporal/bin/python openai_agents_temporal_turn.py [--address host:port]``.
Tracing is disabled (it would otherwise try to export spans).
"""
# mypy: ignore-errors
# (openai-agents and temporalio-openai-agents are installed only in the Temporal benchmark
# venv, not the project venv.)

from __future__ import annotations

import importlib.metadata
import itertools
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from _common import report, run, time_turns
from _temporal_common import activities_run, connect, dev_server, parse_args
from temporalio import activity, workflow
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )
    from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
    from temporalio.openai_agents import workflow as agents_workflow
    from temporalio.openai_agents.testing import TestModelProvider

_ids = itertools.count()
TIMEOUT = timedelta(seconds=60)


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
        # The workload runs Runner.run, which never streams: a streamed call is a mistake.
        raise RuntimeError("this benchmark's scripted model answers whole responses only")


@activity.defn
async def noop() -> str:
    """Does nothing."""
    return "ok"


@workflow.defn(name="benchmark.openai_agents_turn")
class AgentTurn:
    @workflow.run
    async def run(self, prompt: str) -> list[Any]:
        tool = agents_workflow.activity_as_tool(noop, start_to_close_timeout=TIMEOUT)
        agent = Agent(name="bench", instructions=None, tools=[tool])
        result = await Runner.run(agent, prompt)
        return [result.final_output, len(result.raw_responses)]


async def main() -> None:
    args = parse_args()
    set_tracing_disabled(True)
    plugin = OpenAIAgentsPlugin(
        model_params=ModelActivityParameters(start_to_close_timeout=TIMEOUT),
        model_provider=TestModelProvider(ScriptedModel()),
    )
    with dev_server(args) as address:
        client = await connect(address, plugins=[plugin])
        worker = Worker(
            client, task_queue=args.task_queue, workflows=[AgentTurn], activities=[noop]
        )
        async with worker:

            async def turn(workflow_id: str | None = None) -> list[Any]:
                return await client.execute_workflow(
                    AgentTurn.run,
                    "hi",
                    id=workflow_id or f"oa-{uuid.uuid4()}",
                    task_queue=args.task_queue,
                )

            check = f"oa-check-{uuid.uuid4()}"
            answer, rounds = await turn(check)
            assert (answer, rounds) == ("done", 2), (answer, rounds)
            scheduled = await activities_run(client, check)
            assert len(scheduled) == 3, scheduled
            assert scheduled[1] == "noop", scheduled
            print(f"activities of one turn: {scheduled}", file=sys.stderr)
            timing = await time_turns(turn, args.turns, args.warmup)
    report(
        "openai-agents on Temporal",
        importlib.metadata.version("temporalio-openai-agents"),
        timing,
    )


if __name__ == "__main__":
    run(main)
