"""Harness benchmark: emelex's per-turn overhead against other agent frameworks.

Run by hand with the project venv::

    .venv/bin/python benchmarks/harness.py            # full run (a few minutes)
    .venv/bin/python benchmarks/harness.py --quick    # smoke run (small counts)

Four measures, each next to an anchor measured in the same run (read the ratios, not the
absolute times: the machines are shared and their speed moves from minute to minute):

1. Tool round overhead: one turn = a scripted model asking for a no-op tool, then answering
   "done" (2 model calls, 1 tool call, instant model). emelex is measured in this process;
   pydantic-ai, openai-agents and LangGraph run the same workload under asyncio in their own
   venv (scripts in ``benchmarks/_competitors/``), interleaved with emelex over ``--rounds``.
2. Event throughput: answer deltas per second through one turn against a raw Trio memory
   channel moving the same number of items between two tasks.
3. Cancellation latency: 100 sessions, each with one cooperative tool in flight; time from
   ``cancel()`` to each tool having seen it and returned, and to each ``session.run`` raising
   (which adds the turn's checkpoint and teardown).
4. Memory per idle (built, never run) session, with tracemalloc.

The competitors need their own venv, outside the repository::

    python3.11 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install pydantic-ai-slim openai-agents langgraph

``EMELEX_BENCH_PYTHON`` overrides the interpreter used for them.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import importlib.metadata
import json
import math
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import tracemalloc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio
import trio.testing

from emelex.agent import (
    AgentCancellation,
    AgentEvent,
    AgentSession,
    AnswerDelta,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
    TurnCancelled,
)
from emelex.model import ToolDefinition
from emelex.testing import Call, Say, ScriptedModel, Step

try:
    from benchmarks._table import NONE, Row, Section, Table, format_text, met, number, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/harness.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import NONE, Row, Section, Table, format_text, met, number, ratio

HERE = Path(__file__).resolve().parent
COMPETITORS = HERE / "_competitors"
DEFAULT_BENCH_PYTHON = Path("/work/bench-venv/bin/python")
INSTALL_HINT = (
    "python3.11 -m venv /work/bench-venv && "
    "/work/bench-venv/bin/pip install pydantic-ai-slim openai-agents langgraph"
)
#: (framework name, script) for each competitor workload.
COMPETITOR_SCRIPTS = (
    ("langgraph (create_react_agent)", "langgraph_turn.py"),
    ("langgraph (2-node graph)", "langgraph_graph_turn.py"),
    ("openai-agents", "openai_agents_turn.py"),
    ("pydantic-ai", "pydantic_ai_turn.py"),
)
EMPTY_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}

#: One turn of the tool-round workload: a tool call, then the answer.
TURN_SCRIPT: list[list[Step]] = [[Call("noop", {})], [Say("done")]]
#: Cancellation goals, as ratios to bare Trio cancelling as many tasks in the same run:
#: every tool stopped (p99), every session.run raised (p50 and p99).
CANCEL_STOPPED_GOAL = 1.2
CANCEL_RAISED_GOAL = 2.0
#: Turns a session runs before it is rebuilt (its history grows by 4 messages a turn).
TURNS_PER_SESSION = 100


# -- tools --------------------------------------------------------------------------------
class NoopTool:
    """Returns at once, asks for no approval."""

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("noop", "Does nothing.", EMPTY_SCHEMA)

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        return ToolOutput("ok")


class WaitTool:
    """A cooperative tool: runs until its invocation is cancelled, then returns."""

    def __init__(self) -> None:
        self.started = 0
        self.target = 0
        self.all_started = trio.Event()
        self.cancelled_at = 0.0
        #: perf_counter() when each invocation saw its cancellation and returned.
        self.stopped_at: list[float] = []

    def expect(self, count: int) -> None:
        self.started = 0
        self.target = count
        self.all_started = trio.Event()
        self.stopped_at = []

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("wait", "Waits until cancelled.", EMPTY_SCHEMA)

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.started += 1
        if self.started == self.target:
            self.all_started.set()
        await invocation.cancellation.wait_cancelled()
        self.stopped_at.append(time.perf_counter())
        return ToolOutput("stopped")


def build_session(
    model: ScriptedModel, workspace: str, tool: NoopTool | WaitTool | None = None
) -> AgentSession:
    builder = AgentSession.builder(model, workspace)
    if tool is not None:
        builder = builder.tool(tool)
    return builder.include_file_tools(False).include_shell_tool(False).build()


# -- small statistics ---------------------------------------------------------------------
def percentile(samples: list[float], fraction: float) -> float:
    """Nearest-rank percentile (``fraction`` in 0..1)."""
    ordered = sorted(samples)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def median_of(values: list[float]) -> float:
    return statistics.median(values) if values else math.nan


# -- 1. tool round overhead ----------------------------------------------------------------
@dataclass
class TurnTiming:
    """Per-turn wall times (seconds) and CPU seconds per turn of one measurement."""

    samples: list[float]
    cpu_per_turn: float

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples) * 1e6

    @property
    def p90_us(self) -> float:
        return percentile(self.samples, 0.9) * 1e6


async def _time_sessions(
    sessions: list[AgentSession], turns_each: int, samples: list[float]
) -> float:
    """Run ``turns_each`` turns on every session, appending each turn's wall time;
    returns the CPU seconds spent."""
    gc.collect()
    cpu = time.process_time()
    for session in sessions:
        for _ in range(turns_each):
            start = time.perf_counter()
            await session.run("hi")
            samples.append(time.perf_counter() - start)
    return time.process_time() - cpu


async def emelex_turns(workspace: str, turns: int, turns_per_session: int) -> TurnTiming:
    """``turns`` tool-round turns on sessions rebuilt every ``turns_per_session`` turns
    (building is not timed; only ``session.run`` is)."""
    tool = NoopTool()
    samples: list[float] = []
    cpu = 0.0
    batch = max(1, 500 // turns_per_session)  # sessions built ahead of each timed batch
    remaining = turns
    while remaining > 0:
        count = min(batch, math.ceil(remaining / turns_per_session))
        sessions = [
            build_session(ScriptedModel(TURN_SCRIPT * turns_per_session), workspace, tool)
            for _ in range(count)
        ]
        try:
            cpu += await _time_sessions(sessions, turns_per_session, samples)
        finally:
            for session in sessions:
                session.close()
        remaining -= count * turns_per_session
    return TurnTiming(samples[:turns], cpu / len(samples))


async def emelex_history_growth(workspace: str, turns: int, window: int) -> dict[int, float]:
    """Median µs per turn over windows of one long session: {history messages: µs}."""
    session = build_session(ScriptedModel(TURN_SCRIPT * turns), workspace, NoopTool())
    samples: list[float] = []
    try:
        await _time_sessions([session], turns, samples)
    finally:
        session.close()
    return {
        4 * start: statistics.median(samples[start : start + window]) * 1e6
        for start in range(0, turns - window + 1, max(window, (turns - window) // 4))
    }


async def warm_up(workspace: str) -> None:
    await emelex_turns(workspace, 200, TURNS_PER_SESSION)


@dataclass
class CompetitorResult:
    framework: str
    version: str = "?"
    rounds_us: list[float] = field(default_factory=list)
    rounds_cpu_us: list[float] = field(default_factory=list)
    rounds_p90_us: list[float] = field(default_factory=list)
    error: str | None = None

    @property
    def us_per_turn(self) -> float:
        return median_of(self.rounds_us)


def bench_python() -> Path | None:
    configured = os.environ.get("EMELEX_BENCH_PYTHON")
    candidate = Path(configured) if configured else DEFAULT_BENCH_PYTHON
    return candidate if candidate.exists() else None


def run_competitor(python: Path, script: str, turns: int, warmup: int) -> dict[str, Any]:
    """Run one competitor script; its last stdout line is a JSON object."""
    command = [str(python), str(COMPETITORS / script), "--turns", str(turns)]
    command += ["--warmup", str(warmup)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1_800, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RuntimeError(f"exit {done.returncode}: {tail}")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


# -- 2. event throughput -------------------------------------------------------------------
async def emelex_deltas_per_second(workspace: str, deltas: int) -> float:
    session = build_session(ScriptedModel([[Say("x")] * deltas]), workspace)
    count = 0

    def on_event(event: AgentEvent) -> None:
        nonlocal count
        if type(event) is AnswerDelta:
            count += 1

    try:
        gc.collect()
        start = time.perf_counter()
        await session.run("hi", on_event=on_event)
        elapsed = time.perf_counter() - start
    finally:
        session.close()
    if count != deltas:
        raise RuntimeError(f"expected {deltas} answer deltas, counted {count}")
    return deltas / elapsed


async def channel_items_per_second(items: int, buffer: int) -> float:
    """A producer task sends ``items`` strings, the consumer counts them."""
    send, receive = trio.open_memory_channel[str](buffer)
    count = 0

    async def produce() -> None:
        async with send:
            for _ in range(items):
                await send.send("x")

    gc.collect()
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with receive:
            async for _ in receive:
                count += 1
    elapsed = time.perf_counter() - start
    if count != items:
        raise RuntimeError(f"expected {items} items, received {count}")
    return items / elapsed


# -- 3. cancellation latency ---------------------------------------------------------------
@dataclass
class CancelLatency:
    """Latencies (seconds) from cancel() to each turn's end, and each repetition's last;
    ``stopped``: from cancel() to each cooperative tool having seen the cancellation and
    returned (for the bare Trio anchor, the same as ``samples``)."""

    samples: list[float] = field(default_factory=list)
    slowest: list[float] = field(default_factory=list)
    stopped: list[float] = field(default_factory=list)

    def stopped_p99(self) -> float:
        """p99 of ``stopped`` in milliseconds (``samples`` when nothing was recorded)."""
        return percentile(self.stopped or self.samples, 0.99) * 1e3

    def summary(self) -> tuple[float, float, float]:
        """(p50, p99, median of the slowest per repetition), in milliseconds."""
        return (
            percentile(self.samples, 0.5) * 1e3,
            percentile(self.samples, 0.99) * 1e3,
            statistics.median(self.slowest) * 1e3,
        )


async def emelex_cancel_latency(
    workspace: str, sessions_count: int, repetitions: int, mode: str
) -> CancelLatency:
    """``mode`` "agent": one shared AgentCancellation; "scope": one enclosing CancelScope."""
    warmup = 2
    tool = WaitTool()
    rounds: list[list[Step]] = [[Call("wait", {})]] * (repetitions + warmup)
    sessions = [
        build_session(ScriptedModel(rounds), workspace, tool) for _ in range(sessions_count)
    ]
    result = CancelLatency()
    try:
        for repetition in range(repetitions + warmup):
            latencies = await _cancel_once(sessions, tool, mode)
            if repetition >= warmup:
                result.samples.extend(latencies)
                result.slowest.append(max(latencies))
                result.stopped.extend(at - tool.cancelled_at for at in tool.stopped_at)
    finally:
        for session in sessions:
            session.close()
    return result


async def _cancel_once(sessions: list[AgentSession], tool: WaitTool, mode: str) -> list[float]:
    tool.expect(len(sessions))
    cancellation = AgentCancellation()
    latencies: list[float] = []
    cancelled_at = 0.0

    async def one(session: AgentSession) -> None:
        try:
            await session.run("go", cancellation=cancellation)
        except TurnCancelled:
            latencies.append(time.perf_counter() - cancelled_at)
            return
        except trio.Cancelled:
            latencies.append(time.perf_counter() - cancelled_at)
            raise
        raise RuntimeError("the turn finished without being cancelled")

    gc.collect()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            for session in sessions:
                nursery.start_soon(one, session)
            await tool.all_started.wait()
            cancelled_at = tool.cancelled_at = time.perf_counter()
            if mode == "agent":
                cancellation.cancel()
            else:
                scope.cancel()
    if len(latencies) != len(sessions):
        raise RuntimeError(f"{len(latencies)} of {len(sessions)} turns reported cancellation")
    return latencies


async def interleaved_cancel_latency(
    workspace: str, sessions_count: int, repetitions: int
) -> tuple[CancelLatency, CancelLatency, CancelLatency]:
    """(by AgentCancellation, by an enclosing scope, bare Trio): one repetition of each
    in turn, the order rotating, so a change of the machine's load reaches all three
    alike instead of whichever ran last (they were three separate runs)."""
    warmup = 2
    tools = {mode: WaitTool() for mode in ("agent", "scope")}
    rounds: list[list[Step]] = [[Call("wait", {})]] * (repetitions + warmup)
    sessions = {
        mode: [build_session(ScriptedModel(rounds), workspace, tool) for _ in range(sessions_count)]
        for mode, tool in tools.items()
    }
    results = {mode: CancelLatency() for mode in ("agent", "scope", "bare")}
    order = ["bare", "agent", "scope"]
    try:
        for repetition in range(repetitions + warmup):
            for mode in order[repetition % 3 :] + order[: repetition % 3]:
                if mode == "bare":
                    latencies = await _bare_cancel_once(sessions_count)
                else:
                    latencies = await _cancel_once(sessions[mode], tools[mode], mode)
                if repetition < warmup:
                    continue
                result = results[mode]
                result.samples.extend(latencies)
                result.slowest.append(max(latencies))
                if mode != "bare":
                    tool = tools[mode]
                    result.stopped.extend(at - tool.cancelled_at for at in tool.stopped_at)
    finally:
        for group in sessions.values():
            for session in group:
                session.close()
    return results["agent"], results["scope"], results["bare"]


async def _bare_cancel_once(tasks: int) -> list[float]:
    latencies: list[float] = []
    cancelled_at = 0.0
    started = 0
    all_started = trio.Event()
    never = trio.Event()

    async def one() -> None:
        nonlocal started
        started += 1
        if started == tasks:
            all_started.set()
        try:
            await never.wait()
        finally:
            latencies.append(time.perf_counter() - cancelled_at)

    gc.collect()
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(one)
            await all_started.wait()
            cancelled_at = time.perf_counter()
            scope.cancel()
    return latencies


# -- 4. memory per idle session ------------------------------------------------------------
def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclass
class MemoryResult:
    kib_per_session: float
    fds_added: int
    fds_left_after_close: int


def memory_per_session(workspace: str, count: int) -> MemoryResult:
    """Build ``count`` sessions sharing one model and one tool; traced bytes per session."""
    model = ScriptedModel(TURN_SCRIPT)
    tool = NoopTool()
    build_session(model, workspace, tool).close()  # import and cache everything first
    gc.collect()
    fds_before = open_fds()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sessions = [build_session(model, workspace, tool) for _ in range(count)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    fds_added = open_fds() - fds_before
    for session in sessions:
        session.close()
    del sessions
    gc.collect()
    return MemoryResult((after - before) / count / 1024, fds_added, open_fds() - fds_before)


# -- the run -------------------------------------------------------------------------------
@dataclass
class Settings:
    rounds: int
    turns: int
    competitor_turns: int
    competitor_warmup: int
    deltas: int
    throughput_repeats: int
    cancel_sessions: int
    cancel_repetitions: int
    memory_sessions: int
    growth_turns: int
    competitors: bool
    profile: bool
    profile_cancel: str | None


def parse_settings(argv: list[str] | None = None) -> Settings:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 3)")
    parser.add_argument("--turns", type=int, help="emelex turns per round (default 3000)")
    parser.add_argument("--competitor-turns", type=int, help="per round (default 1000)")
    parser.add_argument("--no-competitors", action="store_true")
    parser.add_argument(
        "--profile", action="store_true", help="only profile emelex tool-round turns (cProfile)"
    )
    parser.add_argument(
        "--profile-cancel",
        choices=("agent", "scope"),
        help="only profile the cancellation window (cancel() until every run raised) of "
        "100 sessions, by AgentCancellation or an enclosing scope, and count task steps",
    )
    args = parser.parse_args(argv)
    quick = bool(args.quick)
    return Settings(
        rounds=args.rounds or (1 if quick else 3),
        turns=args.turns or (300 if quick else 3_000),
        competitor_turns=args.competitor_turns or (50 if quick else 1_000),
        competitor_warmup=10 if quick else 100,
        deltas=10_000 if quick else 100_000,
        throughput_repeats=1 if quick else 3,
        cancel_sessions=100,
        cancel_repetitions=5 if quick else 50,
        memory_sessions=200 if quick else 2_000,
        growth_turns=200 if quick else 1_000,
        competitors=not args.no_competitors,
        profile=bool(args.profile),
        profile_cancel=args.profile_cancel,
    )


def calibration_us() -> float:
    """A fixed pure-Python loop (µs), printed so a loaded machine shows in the output."""
    best = math.inf
    for _ in range(20):
        start = time.perf_counter()
        sum(range(1_000))
        best = min(best, time.perf_counter() - start)
    return best * 1e6


def say(text: str) -> None:
    print(text, flush=True)


def measure_tool_rounds(
    settings: Settings, workspace: str
) -> tuple[list[TurnTiming], list[TurnTiming], list[CompetitorResult], str | None]:
    """Interleave emelex (both variants) with each competitor, ``settings.rounds`` times."""
    python = bench_python() if settings.competitors else None
    missing: str | None = None
    if settings.competitors and python is None:
        missing = f"competitors not installed: run `{INSTALL_HINT}` (or set EMELEX_BENCH_PYTHON)"
        say(missing)
    elif not settings.competitors:
        missing = "competitors skipped (--no-competitors)"
    results = [CompetitorResult(name) for name, _ in COMPETITOR_SCRIPTS]
    rebuilt: list[TurnTiming] = []
    fresh: list[TurnTiming] = []
    trio.run(warm_up, workspace)
    for round_number in range(1, settings.rounds + 1):
        rebuilt.append(trio.run(emelex_turns, workspace, settings.turns, TURNS_PER_SESSION))
        fresh.append(trio.run(emelex_turns, workspace, settings.turns, 1))
        say(
            f"  round {round_number}: emelex {rebuilt[-1].median_us:.0f} µs/turn "
            f"(rebuilt every {TURNS_PER_SESSION}), {fresh[-1].median_us:.0f} µs/turn (fresh)"
        )
        if python is None:
            continue
        for result, (_, script) in zip(results, COMPETITOR_SCRIPTS, strict=True):
            if result.error is not None:
                continue
            try:
                line = run_competitor(
                    python, script, settings.competitor_turns, settings.competitor_warmup
                )
            except (RuntimeError, subprocess.TimeoutExpired, ValueError) as exc:
                result.error = str(exc)
                say(f"  round {round_number}: {result.framework} failed: {exc}")
                continue
            result.version = str(line.get("version", "?"))
            result.rounds_us.append(float(line["us_per_turn"]))
            result.rounds_cpu_us.append(float(line.get("cpu_us_per_turn", math.nan)))
            result.rounds_p90_us.append(float(line.get("p90_us", math.nan)))
            say(f"  round {round_number}: {result.framework} {result.rounds_us[-1]:.0f} µs/turn")
    return rebuilt, fresh, results, missing


def profile_turns(turns: int) -> None:
    """Profile ``turns`` tool-round turns (sessions rebuilt every 100 turns, building not
    profiled) and print the top entries by cumulative and by own time."""
    with tempfile.TemporaryDirectory(prefix="emelex-bench-") as workspace:
        trio.run(warm_up, workspace)
        profiler = cProfile.Profile()

        async def profiled() -> None:
            tool = NoopTool()
            for _ in range(max(1, turns // TURNS_PER_SESSION)):
                model = ScriptedModel(TURN_SCRIPT * TURNS_PER_SESSION)
                with build_session(model, workspace, tool) as session:
                    profiler.enable()
                    for _ in range(TURNS_PER_SESSION):
                        await session.run("hi")
                    profiler.disable()

        trio.run(profiled)
    for order in ("cumulative", "tottime"):
        pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(15)


class _StepCounter(trio.abc.Instrument):
    """Counts task steps while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            self.steps += 1


def profile_cancellation(mode: str, sessions_count: int, repetitions: int) -> None:
    """cProfile of the cancellation window alone (from ``cancel()`` until every
    ``session.run`` has raised), and the task steps it takes against bare Trio's."""
    profiler = cProfile.Profile()
    counter = _StepCounter()

    async def cancel_once(sessions: list[AgentSession], tool: WaitTool) -> None:
        tool.expect(len(sessions))
        cancellation = AgentCancellation()

        async def one(session: AgentSession) -> None:
            with contextlib.suppress(TurnCancelled):
                await session.run("go", cancellation=cancellation)

        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                for session in sessions:
                    nursery.start_soon(one, session)
                await tool.all_started.wait()
                counter.steps, counter.on = 0, True
                profiler.enable()
                if mode == "agent":
                    cancellation.cancel()
                else:
                    scope.cancel()
        profiler.disable()
        counter.on = False

    async def bare_steps() -> int:
        never = trio.Event()
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                for _ in range(sessions_count):
                    nursery.start_soon(never.wait)
                await trio.testing.wait_all_tasks_blocked()
                counter.steps, counter.on = 0, True
                scope.cancel()
        counter.on = False
        return counter.steps

    async def run(workspace: str) -> None:
        trio.lowlevel.add_instrument(counter)
        tool = WaitTool()
        rounds: list[list[Step]] = [[Call("wait", {})]] * repetitions
        sessions = [
            build_session(ScriptedModel(rounds), workspace, tool) for _ in range(sessions_count)
        ]
        steps: list[int] = []
        try:
            for _ in range(repetitions):
                await cancel_once(sessions, tool)
                steps.append(counter.steps)
        finally:
            for session in sessions:
                session.close()
        bare = await bare_steps()
        say(
            f"task steps from cancel() until every run raised ({mode}, {sessions_count} "
            f"sessions): median {statistics.median(steps):.0f}; bare Trio: {bare}"
        )

    with tempfile.TemporaryDirectory(prefix="emelex-bench-") as workspace:
        trio.run(run, workspace)
    for order in ("tottime", "cumulative"):
        pstats.Stats(profiler).strip_dirs().sort_stats(order).print_stats(25)


def main(argv: list[str] | None = None) -> None:
    settings = parse_settings(argv)
    if settings.profile_cancel is not None:
        profile_cancellation(
            settings.profile_cancel, settings.cancel_sessions, settings.cancel_repetitions
        )
        return
    if settings.profile:
        profile_turns(settings.turns)
        return
    report(measure(settings))


def rows(quick: bool) -> list[Row]:
    """The summary rows of a full (or ``--quick``) run, for ``python -m benchmarks``;
    prints the script's own report on the way."""
    measured = measure(parse_settings(["--quick"] if quick else []))
    report(measured)
    return summary_rows(measured)


@dataclass
class Measurements:
    """Everything one run measured (see :func:`measure`)."""

    settings: Settings
    rebuilt: list[TurnTiming]
    fresh: list[TurnTiming]
    competitors: list[CompetitorResult]
    missing: str | None
    growth: dict[int, float]
    emelex_rates: list[float]
    channel_rates: dict[int, list[float]]
    #: AgentCancellation, enclosing CancelScope, bare Trio, one session.
    cancels: tuple[CancelLatency, CancelLatency, CancelLatency, CancelLatency]
    memory: MemoryResult


def measure(settings: Settings) -> Measurements:
    say(
        f"emelex {importlib.metadata.version('emelex')}, trio {trio.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}, calibration loop {calibration_us():.1f} µs"
    )
    with tempfile.TemporaryDirectory(prefix="emelex-bench-") as workspace:
        say("\n1. tool round (2 model calls + 1 no-op tool, instant scripted model)")
        rebuilt, fresh, competitors, missing = measure_tool_rounds(settings, workspace)
        growth = trio.run(emelex_history_growth, workspace, settings.growth_turns, 50)

        say(f"\n2. event throughput ({settings.deltas:,} answer deltas in one turn)")
        emelex_rates: list[float] = []
        channel_rates: dict[int, list[float]] = {0: [], 100: []}
        for _ in range(settings.throughput_repeats):
            emelex_rates.append(trio.run(emelex_deltas_per_second, workspace, settings.deltas))
            for buffer, rates in channel_rates.items():
                rates.append(trio.run(channel_items_per_second, settings.deltas, buffer))

        say(f"\n3. cancellation latency ({settings.cancel_sessions} cooperative tools in flight)")
        by_agent, by_scope, bare = trio.run(
            interleaved_cancel_latency,
            workspace,
            settings.cancel_sessions,
            settings.cancel_repetitions,
        )
        single = trio.run(
            emelex_cancel_latency, workspace, 1, settings.cancel_repetitions * 4, "agent"
        )

        say(f"\n4. memory per idle session ({settings.memory_sessions:,} sessions)")
        memory = memory_per_session(workspace, settings.memory_sessions)

    return Measurements(
        settings,
        rebuilt,
        fresh,
        competitors,
        missing,
        growth,
        emelex_rates,
        channel_rates,
        (by_agent, by_scope, bare, single),
        memory,
    )


def summary_rows(measured: Measurements) -> list[Row]:
    """The run's figures as table rows, each next to its anchor and goal."""
    rebuilt_us = median_of([timing.median_us for timing in measured.rebuilt])
    fresh_us = median_of([timing.median_us for timing in measured.fresh])
    ran = [result for result in measured.competitors if result.rounds_us]
    fastest = min(ran, key=lambda result: result.us_per_turn) if ran else None
    rows: list[Row] = []
    for label, value in (
        (f"tool round µs/turn (session rebuilt every {TURNS_PER_SESSION} turns)", rebuilt_us),
        ("tool round µs/turn (fresh session every turn)", fresh_us),
    ):
        if fastest is None:
            failures = "; ".join(
                f"{result.framework}: {result.error}"
                for result in measured.competitors
                if result.error
            )
            reason = measured.missing or f"every competitor failed ({failures})"
            rows.append(Row.skipped(label, reason, goal="≤ 0.25x", emelex=number(value, 0)))
            continue
        others = ", ".join(
            f"{result.framework} {result.version} {result.us_per_turn:,.0f} µs"
            for result in sorted(ran, key=lambda result: result.us_per_turn)
        )
        failed = [result.framework for result in measured.competitors if result.error]
        note = f"fastest of: {others}" + (f"; failed: {', '.join(failed)}" if failed else "")
        rows.append(
            Row(
                label,
                number(value, 0),
                f"{fastest.framework} {fastest.us_per_turn:,.0f}",
                ratio(value / fastest.us_per_turn, 3, "time"),
                "≤ 0.25x",
                met(value <= 0.25 * fastest.us_per_turn),
                note,
            )
        )

    channel_best = max(
        measured.channel_rates, key=lambda buffer: median_of(measured.channel_rates[buffer])
    )
    emelex_rate = median_of(measured.emelex_rates)
    channel_rate = median_of(measured.channel_rates[channel_best])
    rows.append(
        Row(
            f"answer deltas/s through a turn ({measured.settings.deltas:,} deltas)",
            number(emelex_rate, 0),
            f"trio memory channel (buffer {channel_best}) {channel_rate:,.0f}",
            ratio(emelex_rate / channel_rate, 2, "speed"),
            "≥ 0.5x",
            met(emelex_rate >= 0.5 * channel_rate),
        )
    )

    agent, scope, bare, single = measured.cancels
    bare_p50, bare_p99, _ = bare.summary()
    single_p50, single_p99, _ = single.summary()
    sessions = measured.settings.cancel_sessions
    for how, latency in (("AgentCancellation", agent), ("enclosing CancelScope", scope)):
        stopped_p99 = latency.stopped_p99()
        times = stopped_p99 / bare_p99
        rows.append(
            Row(
                f"cancel → every tool stopped, p99, {sessions} sessions, by {how}",
                f"{stopped_p99:.2f} ms",
                f"{sessions} bare Trio tasks {bare_p99:.2f} ms",
                ratio(times, 2, "time"),
                f"≤ {CANCEL_STOPPED_GOAL:g}x",
                met(times <= CANCEL_STOPPED_GOAL),
                "from cancel() to each cooperative tool having seen it and returned",
            )
        )
    for how, latency in (("AgentCancellation", agent), ("enclosing CancelScope", scope)):
        p50, p99, _ = latency.summary()
        for name, ours, theirs in (("p50", p50, bare_p50), ("p99", p99, bare_p99)):
            times = ours / theirs
            rows.append(
                Row(
                    f"cancel → every session.run raised, {name}, {sessions} sessions, by {how}",
                    f"{ours:.2f} ms",
                    f"{sessions} bare Trio tasks {theirs:.2f} ms",
                    ratio(times, 1, "time"),
                    f"≤ {CANCEL_RAISED_GOAL:g}x",
                    met(times <= CANCEL_RAISED_GOAL),
                    "includes each turn's checkpoint and actor teardown; one session alone: "
                    f"p50 {single_p50:.2f} ms, p99 {single_p99:.2f} ms",
                )
            )

    memory = measured.memory
    rows.append(
        Row(
            f"memory per idle session ({measured.settings.memory_sessions:,} sessions)",
            f"{memory.kib_per_session:.1f} KiB",
            NONE,
            NONE,
            "≤ 50 KiB",
            met(memory.kib_per_session <= 50),
        )
    )
    return rows


def report(measured: Measurements) -> None:
    settings, rebuilt, fresh = measured.settings, measured.rebuilt, measured.fresh
    competitors, missing, growth = measured.competitors, measured.missing, measured.growth
    channel_rates, memory = measured.channel_rates, measured.memory
    agent, scope, bare, single = measured.cancels
    rebuilt_us = median_of([timing.median_us for timing in rebuilt])
    fresh_us = median_of([timing.median_us for timing in fresh])
    say("\nTool round, µs per turn (median of per-round medians; CPU = process time / turns)")
    say(f"  {'framework':<34} {'version':<9} {'median':>9} {'p90':>9} {'CPU':>9}")
    lines: list[tuple[str, str, float, float, float]] = [
        (
            f"emelex (session rebuilt every {TURNS_PER_SESSION})",
            importlib.metadata.version("emelex"),
            rebuilt_us,
            median_of([timing.p90_us for timing in rebuilt]),
            median_of([timing.cpu_per_turn * 1e6 for timing in rebuilt]),
        ),
        (
            "emelex (fresh session every turn)",
            importlib.metadata.version("emelex"),
            fresh_us,
            median_of([timing.p90_us for timing in fresh]),
            median_of([timing.cpu_per_turn * 1e6 for timing in fresh]),
        ),
    ]
    for result in competitors:
        if result.rounds_us:
            lines.append(
                (
                    result.framework,
                    result.version,
                    result.us_per_turn,
                    median_of(result.rounds_p90_us),
                    median_of(result.rounds_cpu_us),
                )
            )
        else:
            say(f"  {result.framework:<34} {result.error or missing or 'not run'}")
    for name, version, median, p90, cpu in lines:
        say(f"  {name:<34} {version:<9} {median:>9.0f} {p90:>9.0f} {cpu:>9.0f}")
    say("  emelex in one long session, median µs per turn by history length at turn start:")
    say("    " + ", ".join(f"{size} msgs: {us:.0f}" for size, us in growth.items()))

    agent_p50, agent_p99, agent_last = agent.summary()
    scope_p50, scope_p99, scope_last = scope.summary()
    bare_p50, bare_p99, bare_last = bare.summary()
    say("\nSummary")
    summary = format_text(Table((Section("harness", tuple(summary_rows(measured))),)))
    say(textwrap.indent(summary.rstrip(), "  "))

    say("\nDetails")
    say(
        "  channel items/s by buffer: "
        + ", ".join(f"{b}: {median_of(r):,.0f}" for b, r in channel_rates.items())
    )
    say(
        f"  cancel ms (p50 / p99 / slowest of {settings.cancel_sessions}, median over "
        f"{settings.cancel_repetitions} reps): AgentCancellation {agent_p50:.2f} / "
        f"{agent_p99:.2f} / {agent_last:.2f}; CancelScope {scope_p50:.2f} / {scope_p99:.2f} "
        f"/ {scope_last:.2f}; bare trio {bare_p50:.3f} / {bare_p99:.3f} / {bare_last:.3f}"
    )
    say(
        f"  cancel → every tool stopped, p99 ms: AgentCancellation {agent.stopped_p99():.2f}; "
        f"CancelScope {scope.stopped_p99():.2f}; bare trio {bare.stopped_p99():.3f}"
    )
    single_p50, single_p99, _ = single.summary()
    say(
        f"  cancel ms with 1 tool in flight ({settings.cancel_repetitions * 4} reps): "
        f"p50 {single_p50:.2f}, p99 {single_p99:.2f}"
    )
    say(
        f"  memory: {memory.fds_added} descriptors for {settings.memory_sessions} sessions, "
        f"{memory.fds_left_after_close} left after close (tracemalloc: Python heap only; "
        "the model and tool objects are shared)"
    )
    if missing:
        say(f"  {missing}")
    say(f"  load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main(sys.argv[1:])
