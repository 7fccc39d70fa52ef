"""A bare temporalio workflow under asyncio: three no-op activities in a row (the shape of
a tool round: model, tool, model), no agent framework and no Trio bridge.

It is the asyncio floor of the Temporal competitors (what their workflows would cost if
their agent loops were free), measured in their venv on the same server. Run with the
Temporal benchmark venv:
``/work/bench-venv-temporal/bin/python temporal_floor_turn.py [--address host:port]``.
"""
# mypy: ignore-errors
# (typed loosely like the other competitor scripts, which run only in the benchmark venv.)

from __future__ import annotations

import importlib.metadata
import uuid
from datetime import timedelta
from typing import Any

from _common import report, run, time_turns
from _temporal_common import activities_run, connect, dev_server, parse_args
from temporalio import activity, workflow
from temporalio.worker import Worker

OPTIONS: dict[str, Any] = {
    "start_to_close_timeout": timedelta(seconds=60),
    "heartbeat_timeout": timedelta(seconds=10),
}


@activity.defn
async def model_round(round_number: int) -> str:
    return "noop" if round_number == 1 else "done"


@activity.defn
async def tool_call(name: str) -> str:
    return "ok"


@workflow.defn(name="benchmark.asyncio_floor")
class FloorTurn:
    @workflow.run
    async def run(self, prompt: str) -> str:
        await workflow.execute_activity(model_round, 1, **OPTIONS)
        await workflow.execute_activity(tool_call, "noop", **OPTIONS)
        return await workflow.execute_activity(model_round, 2, **OPTIONS)


async def main() -> None:
    args = parse_args()
    with dev_server(args) as address:
        client = await connect(address)
        worker = Worker(
            client,
            task_queue=args.task_queue,
            workflows=[FloorTurn],
            activities=[model_round, tool_call],
        )
        async with worker:

            async def turn(workflow_id: str | None = None) -> str:
                return await client.execute_workflow(
                    FloorTurn.run,
                    "hi",
                    id=workflow_id or f"floor-{uuid.uuid4()}",
                    task_queue=args.task_queue,
                )

            check = f"floor-check-{uuid.uuid4()}"
            assert await turn(check) == "done"
            assert len(await activities_run(client, check)) == 3
            timing = await time_turns(turn, args.turns, args.warmup)
    report("temporalio alone (asyncio)", importlib.metadata.version("temporalio"), timing)


if __name__ == "__main__":
    run(main)
