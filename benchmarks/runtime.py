"""Runtime benchmark: actors, mailboxes and the dedicated worker against bare Trio.

Run by hand: ``python benchmarks/runtime.py``. Every figure is measured in this run
next to its baseline; read the ratios, not the absolute times.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable

import trio

from emelex.runtime import ActorContext, Mailbox, WorkerJob, open_dedicated_worker, open_supervisor

REPEATS = 5


def best_of(fn: Callable[[], Awaitable[float]]) -> float:
    """Median seconds of REPEATS runs of the async ``fn`` (each returns its own time)."""
    results = [trio.run(fn) for _ in range(REPEATS)]
    return statistics.median(results)


SPAWNS = 5_000


async def bare_spawn() -> float:
    async def noop() -> None:
        await trio.lowlevel.checkpoint()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(SPAWNS):
            nursery.start_soon(noop)
    return time.perf_counter() - start


async def actor_spawn() -> float:
    async def noop(ctx: ActorContext) -> None:
        await trio.lowlevel.checkpoint()

    async with open_supervisor("bench") as sup:
        start = time.perf_counter()
        async with sup.open_actor("turn", "t") as turn:
            for _ in range(SPAWNS):
                turn.start_soon(noop, kind="tool", name="noop")
        return time.perf_counter() - start


async def actor_call() -> float:
    async def noop(ctx: ActorContext) -> None:
        await trio.lowlevel.checkpoint()

    async with open_supervisor("bench") as sup:
        start = time.perf_counter()
        async with sup.open_actor("turn", "t") as turn:
            for _ in range(SPAWNS):
                await turn.run(noop, kind="tool", name="noop")
        return time.perf_counter() - start


async def bare_call() -> float:
    async def noop(done: trio.Event) -> None:
        await trio.lowlevel.checkpoint()
        done.set()

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(SPAWNS):
            done = trio.Event()
            nursery.start_soon(noop, done)
            await done.wait()
    return time.perf_counter() - start


MESSAGES = 100_000


async def raw_channel() -> float:
    send, receive = trio.open_memory_channel[int](64)

    async def consume() -> None:
        async for _ in receive:
            pass

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        async with send:
            for n in range(MESSAGES):
                await send.send(n)
    return time.perf_counter() - start


async def mailbox() -> float:
    box = Mailbox[int](64)

    async def consume() -> None:
        async for _ in box:
            pass

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        for n in range(MESSAGES):
            await box.put(n)
        box.close()
    return time.perf_counter() - start


ROUND_TRIPS = 2_000


def _job(job: WorkerJob[None, int]) -> int:
    return 1


def _plain() -> int:
    return 1


async def to_thread() -> float:
    start = time.perf_counter()
    for _ in range(ROUND_TRIPS):
        await trio.to_thread.run_sync(_plain)
    return time.perf_counter() - start


async def worker() -> float:
    async with open_dedicated_worker("bench") as dedicated:
        start = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            await dedicated.run(_job)
        return time.perf_counter() - start


def main() -> None:
    rows = [
        ("actor spawn+join (start_soon)", actor_spawn, bare_spawn, SPAWNS, None),
        ("actor call+result (run)", actor_call, bare_call, SPAWNS, None),
        ("mailbox put/get throughput", mailbox, raw_channel, MESSAGES, 0.5),
        ("dedicated worker round trip", worker, to_thread, ROUND_TRIPS, None),
    ]
    print(f"{'measure':34} {'emelex':>12} {'baseline':>12} {'speed ratio':>12} {'goal':>8}")
    for label, ours, theirs, count, goal in rows:
        ours_s = best_of(ours)
        theirs_s = best_of(theirs)
        # Speed ratio: baseline time / emelex time (1.0 = as fast, 0.5 = half as fast).
        ratio = theirs_s / ours_s
        goal_text = f">={goal}" if goal is not None else "-"
        print(
            f"{label:34} {ours_s / count * 1e6:9.2f} us {theirs_s / count * 1e6:9.2f} us "
            f"{ratio:11.2f}x {goal_text:>8}"
        )


if __name__ == "__main__":
    main()
