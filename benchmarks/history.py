"""History-independent rounds and many sessions at once.

Two measures of the tool-round workload of ``harness.py`` (a scripted model asks for a
no-op tool, then answers; only ``session.run`` is timed):

1. A turn's cost at 1,000 messages of history against its cost at 0, interleaved turn by
   turn: each pair runs one turn on a fresh session resumed from a 1,000-message history
   and one on a fresh empty session (building is not timed; CPU time, the harness's own
   work), so both see the same machine.
   The goal is at most 1.2x: validating, measuring and fitting history happen once per
   message, when it enters history, not once per round.
2. 1,000 sessions each running tool rounds concurrently (one nursery) against one session
   running the same number of rounds alone: aggregate rounds/s over the single session's
   rate. The goal is at least 0.8x: no cost in the runtime, supervisor registry or
   scheduler grows with the number of live sessions.

    .venv/bin/python benchmarks/history.py [--quick]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

from emelex.agent import AgentSession
from emelex.model import Message
from emelex.testing import ScriptedModel

try:
    from benchmarks._table import Row, met, ratio
    from benchmarks.harness import TURN_SCRIPT, NoopTool, build_session
except ModuleNotFoundError:  # run as a script: python benchmarks/history.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, met, ratio
    from benchmarks.harness import TURN_SCRIPT, NoopTool, build_session

HISTORY_GOAL = 1.2
CONCURRENT_GOAL = 0.8
HISTORY_MESSAGES = 1_000
SESSIONS = 1_000


async def _history(workspace: str, messages: int) -> tuple[Message, ...]:
    """A real committed history of ``messages`` messages (tool rounds, 4 a turn)."""
    turns = messages // 4
    session = build_session(ScriptedModel(TURN_SCRIPT * turns), workspace, NoopTool())
    try:
        for _ in range(turns):
            await session.run("hi")
        return session.history
    finally:
        session.close()


def _resumed(workspace: str, history: tuple[Message, ...], tool: NoopTool) -> AgentSession:
    builder = AgentSession.builder(ScriptedModel(TURN_SCRIPT), workspace).tool(tool)
    return builder.history(history).include_file_tools(False).include_shell_tool(False).build()


async def _one_turn(session: AgentSession) -> float:
    """CPU seconds of one turn (the harness's own work: less disturbed than wall time by
    other jobs on a shared machine)."""
    try:
        started = time.process_time()
        await session.run("hi")
        return time.process_time() - started
    finally:
        session.close()


async def history_ratio(workspace: str, pairs: int) -> tuple[float, float]:
    """(median seconds per turn at 0 messages, at ``HISTORY_MESSAGES``), interleaved."""
    history = await _history(workspace, HISTORY_MESSAGES)
    tool = NoopTool()
    empty: list[float] = []
    long: list[float] = []
    for _ in range(20):  # warm-up
        await _one_turn(_resumed(workspace, (), tool))
        await _one_turn(_resumed(workspace, history, tool))
    gc.collect()
    for index in range(pairs):
        # Alternate which side goes first so neither always follows the other.
        first, second = (history, ()) if index % 2 else ((), history)
        sessions = _resumed(workspace, first, tool), _resumed(workspace, second, tool)
        gc.collect()  # building's garbage is not the turns' to collect
        a = await _one_turn(sessions[0])
        b = await _one_turn(sessions[1])
        long.append(a if first else b)
        empty.append(b if first else a)
    return statistics.median(empty), statistics.median(long)


async def _rounds(session: AgentSession, turns: int) -> None:
    for _ in range(turns):
        await session.run("hi")


async def concurrent_ratio(workspace: str, sessions: int, turns: int) -> tuple[float, float]:
    """(rounds/s of one session alone, aggregate rounds/s of ``sessions`` at once); a turn
    is two model rounds and one tool call."""
    tool = NoopTool()

    def build(count: int) -> list[AgentSession]:
        return [
            build_session(ScriptedModel(TURN_SCRIPT * turns), workspace, tool) for _ in range(count)
        ]

    async def timed(group: list[AgentSession]) -> float:
        gc.collect()
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for session in group:
                nursery.start_soon(_rounds, session, turns)
        elapsed = time.perf_counter() - started
        for session in group:
            session.close()
        return 2 * turns * len(group) / elapsed

    single: list[float] = []
    many: list[float] = []
    await timed(build(1))  # warm-up
    for _ in range(3):
        # One session alone runs as many turns as the crowd does in total, in batches
        # of ``turns`` on fresh sessions (as long a history as each of the crowd's).
        group = build(sessions)
        gc.collect()
        started = time.perf_counter()
        for session in group:
            await _rounds(session, turns)
        single.append(2 * turns * sessions / (time.perf_counter() - started))
        for session in group:
            session.close()
        many.append(await timed(build(sessions)))
    return statistics.median(single), statistics.median(many)


def measure(pairs: int, sessions: int, turns: int) -> list[Row]:
    with tempfile.TemporaryDirectory() as workspace:
        empty, long = trio.run(history_ratio, workspace, pairs)
        times = long / empty
        print(
            f"tool round at 0 messages {empty * 1e6:,.0f} µs, at {HISTORY_MESSAGES:,} "
            f"{long * 1e6:,.0f} µs: {times:.3f}x (median of {pairs} interleaved pairs)"
        )
        one, crowd = trio.run(concurrent_ratio, workspace, sessions, turns)
        speed = crowd / one
        print(
            f"rounds/s: one session {one:,.0f}, {sessions:,} sessions at once {crowd:,.0f}: "
            f"{speed:.3f}x"
        )
    return [
        Row(
            f"tool round CPU µs/turn at {HISTORY_MESSAGES:,} messages of history "
            f"(median of {pairs} interleaved pairs)",
            f"{long * 1e6:,.0f}",
            f"same at 0 messages {empty * 1e6:,.0f}",
            ratio(times, 2, "time"),
            f"≤ {HISTORY_GOAL:g}x",
            met(times <= HISTORY_GOAL),
        ),
        Row(
            f"{sessions:,} concurrent sessions running tool rounds, aggregate rounds/s "
            f"({turns} turns each, median of 3)",
            f"{crowd:,.0f}",
            f"one session alone {one:,.0f}",
            ratio(speed, 2, "speed"),
            f"≥ {CONCURRENT_GOAL:g}x",
            met(speed >= CONCURRENT_GOAL),
        ),
    ]


def rows(quick: bool) -> list[Row]:
    return measure(100, 200, 2) if quick else measure(400, SESSIONS, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer pairs and sessions")
    args = parser.parse_args()
    rows(args.quick)


if __name__ == "__main__":
    main()
