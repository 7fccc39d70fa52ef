"""Runtime benchmark: actors, mailboxes and the dedicated worker against bare Trio.

Run by hand: ``python benchmarks/runtime.py`` (``--quick``: a smoke run with small
counts). Every figure is measured in this run next to its baseline; read the ratios, not
the absolute times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import trio

from emelex.runtime import ActorContext, Mailbox, WorkerJob, open_dedicated_worker, open_supervisor

try:
    from benchmarks._table import Row, Section, Table, format_text, met, ratio
except ModuleNotFoundError:  # run as a script: python benchmarks/runtime.py
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks._table import Row, Section, Table, format_text, met, ratio

REPEATS = 5
QUICK_REPEATS = 3
#: Counts are divided by this in a quick run.
QUICK_DIVISOR = 5


def best_of(fn: Callable[[int], Awaitable[float]], count: int, repeats: int) -> float:
    """Median seconds of ``repeats`` runs of the async ``fn(count)`` (each returns its own
    time)."""
    results = [trio.run(fn, count) for _ in range(repeats)]
    return statistics.median(results)


SPAWNS = 5_000


async def bare_spawn(count: int) -> float:
    async def noop() -> None:
        await trio.lowlevel.checkpoint()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(noop)
    return time.perf_counter() - start


async def actor_spawn(count: int) -> float:
    async def noop(ctx: ActorContext) -> None:
        await trio.lowlevel.checkpoint()

    async with open_supervisor("bench") as sup:
        start = time.perf_counter()
        async with sup.open_actor("turn", "t") as turn:
            for _ in range(count):
                turn.start_soon(noop, kind="tool", name="noop")
        return time.perf_counter() - start


async def actor_call(count: int) -> float:
    async def noop(ctx: ActorContext) -> None:
        await trio.lowlevel.checkpoint()

    async with open_supervisor("bench") as sup:
        start = time.perf_counter()
        async with sup.open_actor("turn", "t") as turn:
            for _ in range(count):
                await turn.run(noop, kind="tool", name="noop")
        return time.perf_counter() - start


async def bare_call(count: int) -> float:
    async def noop(done: trio.Event) -> None:
        await trio.lowlevel.checkpoint()
        done.set()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            done = trio.Event()
            nursery.start_soon(noop, done)
            await done.wait()
    return time.perf_counter() - start


MESSAGES = 100_000


async def raw_channel(count: int) -> float:
    send, receive = trio.open_memory_channel[int](64)

    async def consume() -> None:
        async for _ in receive:
            pass

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        async with send:
            for n in range(count):
                await send.send(n)
    return time.perf_counter() - start


async def mailbox(count: int) -> float:
    box = Mailbox[int](64)

    async def consume() -> None:
        async for _ in box:
            pass

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        for n in range(count):
            await box.put(n)
        box.close()
    return time.perf_counter() - start


ROUND_TRIPS = 2_000


def _job(job: WorkerJob[None, int]) -> int:
    return 1


def _plain() -> int:
    return 1


async def to_thread(count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        await trio.to_thread.run_sync(_plain)
    return time.perf_counter() - start


async def worker(count: int) -> float:
    async with open_dedicated_worker("bench") as dedicated:
        start = time.perf_counter()
        for _ in range(count):
            await dedicated.run(_job)
        return time.perf_counter() - start


#: (measure, emelex, baseline, baseline's name, count, goal as a speed ratio or None)
MEASURES: tuple[
    tuple[
        str,
        Callable[[int], Awaitable[float]],
        Callable[[int], Awaitable[float]],
        str,
        int,
        float | None,
    ],
    ...,
] = (
    ("actor spawn + join via start_soon", actor_spawn, bare_spawn, "bare start_soon", SPAWNS, None),
    ("DROP actor call + result via run", actor_call, bare_call, "bare task + Event", SPAWNS, None),
    ("mailbox put/get", mailbox, raw_channel, "raw memory channel", MESSAGES, 0.5),
    (
        "dedicated worker round trip",
        worker,
        to_thread,
        "trio.to_thread.run_sync",
        ROUND_TRIPS,
        None,
    ),
)


def rows(quick: bool) -> list[Row]:
    """One row per measure: µs per operation, the speed ratio baseline time / emelex
    time (1.0 = as fast, 0.5 = half as fast)."""
    repeats = QUICK_REPEATS if quick else REPEATS
    out: list[Row] = []
    for label, ours, theirs, anchor, full_count, goal in MEASURES:
        count = full_count // QUICK_DIVISOR if quick else full_count
        ours_s = best_of(ours, count, repeats)
        theirs_s = best_of(theirs, count, repeats)
        speed = theirs_s / ours_s
        out.append(
            Row(
                f"{label} ({count:,} ops, median of {repeats})",
                f"{ours_s / count * 1e6:.2f} µs",
                f"{anchor} {theirs_s / count * 1e6:.2f} µs",
                ratio(speed, 2, "speed"),
                f"≥ {goal}x" if goal is not None else "—",
                met(speed >= goal) if goal is not None else "n/a",
            )
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small counts (a smoke run)")
    args = parser.parse_args()
    print(format_text(Table((Section("runtime", tuple(rows(bool(args.quick)))),))), end="")


if __name__ == "__main__":
    main()
