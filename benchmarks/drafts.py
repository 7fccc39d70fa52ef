"""Live drafts (watch ``live=True``): what streaming the running answer to watchers costs
the turn, measured against the same turn with no watcher, in the same run.

- a turn streaming a delta every 2 ms (faster than Gemma 3 270M here) with 100 live
  watchers reading every draft, against no watcher (goal ≤ 1.1x time);
- a turn of deltas as fast as a ScriptedModel yields them, with one live watcher that
  never reads (goal ≤ 1.2x time: a slow watcher never holds the stream, its drafts
  coalesce), and with 100 reading (no goal: it shows the per-watcher cost);
- 100 live watchers of the paced answer: p99 from a delta reaching the Host to each
  watcher receiving it (goal ≤ 100 ms; a draft is published at most every 50 ms).

    .venv/bin/python benchmarks/drafts.py [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import DraftCleared, DraftUpdated, QueueChanged
from emelex.model import (
    AgentModel,
    Capabilities,
    GenerationEvent,
    GenerationRequest,
    GenerationStream,
    TextDelta,
)
from emelex.service import Host
from emelex.testing import Say, ScriptedModel, Wait

try:
    from benchmarks._table import Row, met, number, ratio
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from benchmarks._table import Row, met, number, ratio

WATCHERS = 100
PIECE = "token "


class _Stamped:
    """The model's stream, noting when each text offset reached the Host."""

    def __init__(self, inner: AgentModel) -> None:
        self.inner = inner
        self.stamps: dict[int, float] = {}  # end offset of each delta -> perf_counter
        self._length = 0

    @property
    def capabilities(self) -> Capabilities:
        return self.inner.capabilities

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStream]:
        self._length = 0
        async with self.inner.generate(request) as stream:
            yield self._stamp(stream)

    async def _stamp(self, stream: GenerationStream) -> AsyncIterator[GenerationEvent]:
        async for event in stream:
            if isinstance(event, TextDelta):
                self._length += len(event.text)
                self.stamps[self._length] = time.perf_counter()
            yield event


def _agent(model: AgentModel) -> Agent:
    builder = Agent.builder().name("bench").instructions("Answer.").model(model)
    return builder.approver(DenyAll()).build()


def _paced(deltas: int) -> list[Say | Wait]:
    steps: list[Say | Wait] = []
    for _ in range(deltas):
        steps += [Wait(0.002), Say(PIECE)]
    return steps


async def _turn(root: Path, steps: Sequence[Say | Wait], watchers: int, *, reading: bool) -> float:
    """Seconds from send to the turn's end, with ``watchers`` live watchers."""
    model = ScriptedModel([steps])
    async with Host.open(root, agents={"bench": _agent(model)}) as host:
        session_id = (await host.create_session("bench", root, operation="c")).session.id
        done = trio.Event()
        async with trio.open_nursery() as nursery:

            async def watcher(task_status: trio.TaskStatus[None]) -> None:
                async with host.watch(session_id, live=True) as updates:
                    task_status.started()
                    if not reading:
                        await done.wait()
                        return
                    async for _ in updates:
                        pass

            for _ in range(watchers):
                await nursery.start(watcher)
            async with host.watch(session_id) as progress:
                started = time.perf_counter()
                await host.send(session_id, "go", operation="s")
                ran = False
                async for update in progress:
                    if isinstance(update, QueueChanged):
                        ran = ran or bool(update.queue.entries)
                        if ran and not update.queue.entries:
                            break
                elapsed = time.perf_counter() - started
            done.set()
            nursery.cancel_scope.cancel()  # the readers would wait for more
        return elapsed


async def _latency(root: Path, deltas: int, watchers: int) -> tuple[float, float]:
    """p50 and p99 seconds from a delta reaching the Host to each live watcher."""
    stamped = _Stamped(ScriptedModel([_paced(deltas)]))
    delays: list[float] = []
    async with Host.open(root, agents={"bench": _agent(stamped)}) as host:
        session_id = (await host.create_session("bench", root, operation="c")).session.id
        total = deltas * len(PIECE)
        async with trio.open_nursery() as nursery:

            async def watcher(task_status: trio.TaskStatus[None]) -> None:
                async with host.watch(session_id, live=True) as updates:
                    task_status.started()
                    async for update in updates:
                        if isinstance(update, DraftUpdated):
                            end = update.text_offset + len(update.text)
                            delays.append(time.perf_counter() - stamped.stamps[end])
                            if end == total:
                                return
                        elif isinstance(update, DraftCleared):
                            return  # the turn committed first

            for _ in range(watchers):
                await nursery.start(watcher)
            await host.send(session_id, "go", operation="s")
    cuts = statistics.quantiles(delays, n=100)
    return cuts[49], cuts[98]


async def measure(quick: bool) -> list[Row]:
    fast = [Say(PIECE)] * (2_000 if quick else 20_000)
    paced = _paced(250 if quick else 1_000)
    repeat = 1 if quick else 3
    runs: dict[str, list[float]] = {k: [] for k in ("alone", "readers", "fast", "slow", "many")}
    with tempfile.TemporaryDirectory() as temp:
        base = Path(temp)
        for n in range(repeat):  # interleaved, so load changes hit every case alike
            runs["alone"].append(await _turn(base / f"a{n}", paced, 0, reading=True))
            runs["readers"].append(await _turn(base / f"r{n}", paced, WATCHERS, reading=True))
            runs["fast"].append(await _turn(base / f"f{n}", fast, 0, reading=True))
            runs["slow"].append(await _turn(base / f"s{n}", fast, 1, reading=False))
            runs["many"].append(await _turn(base / f"m{n}", fast, WATCHERS, reading=True))
        p50, p99 = await _latency(base / "latency", 200 if quick else 1_000, WATCHERS)
    alone, readers, fast_alone, slow, many = (
        statistics.median(runs[k]) for k in ("alone", "readers", "fast", "slow", "many")
    )
    print(
        f"paced turn of {len(paced) // 2:,} deltas: {alone * 1e3:.0f} ms alone,"
        f" {readers * 1e3:.0f} ms with {WATCHERS} live readers; instant turn of"
        f" {len(fast):,} deltas: {fast_alone * 1e3:.0f} ms alone, {slow * 1e3:.0f} ms with"
        f" one live watcher not reading, {many * 1e3:.0f} ms with {WATCHERS} reading;"
        f" delta to watcher p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.2f} ms",
        file=sys.stderr,
    )
    return [
        Row(
            f"a turn of {len(paced) // 2:,} deltas (one per 2 ms), {WATCHERS} live watchers",
            f"{number(readers * 1e3)} ms",
            f"{number(alone * 1e3)} ms with no watcher",
            ratio(readers / alone, unit="time"),
            "≤ 1.1x",
            met(readers / alone <= 1.1),
        ),
        Row(
            f"a turn of {len(fast):,} instant deltas, one live watcher that never reads",
            f"{number(slow * 1e3)} ms",
            f"{number(fast_alone * 1e3)} ms with no watcher",
            ratio(slow / fast_alone, unit="time"),
            "≤ 1.2x",
            met(slow / fast_alone <= 1.2),
        ),
        Row(
            f"a turn of {len(fast):,} instant deltas, {WATCHERS} live watchers reading",
            f"{number(many * 1e3)} ms",
            f"{number(fast_alone * 1e3)} ms with no watcher",
            ratio(many / fast_alone, unit="time"),
        ),
        Row(
            f"a delta to each of {WATCHERS} live watchers, p99 (p50 {p50 * 1e3:.2f} ms)",
            f"{number(p99 * 1e3, 2)} ms",
            goal="≤ 100 ms",
            met=met(p99 <= 0.100),
        ),
    ]


def rows(quick: bool) -> list[Row]:
    return trio.run(measure, quick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (fewer deltas)")
    for row in rows(parser.parse_args().quick):
        print(row)


if __name__ == "__main__":
    main()
