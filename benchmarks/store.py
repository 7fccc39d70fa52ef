"""The session store on PostgreSQL against SQLite and against raw psycopg, same run.

- driving psycopg from Trio: the blocking API on the store's worker threads against the
  async API through trio-asyncio (one 100-row keyset page per call, one caller and 8);
  the store uses whichever is faster, and docs/service/scale-out.md records the figures;
- turn commits per second (4 rows, one transaction each), PostgreSQL against SQLite;
- 100-row page reads per second, PostgreSQL against SQLite;
- a store page read against the same keyset query run directly through psycopg on a
  thread (goal <= 1.5x time), in alternating rounds over the same positions, wall and
  CPU time;
- failover: SIGKILL of a lease-holding Host process mid-turn to another Host holding the
  session's lease, and to the session's next queue event (a turn taken up mid-way
  writes its first one when it ends) (goal <= lease + 1 s);
- watch latency across Hosts: a commit by one store to the rows reaching a watcher of a
  Host on another connection (LISTEN/NOTIFY, rows read from the tables), p99 <= 100 ms.

By hand; needs PostgreSQL binaries (a throwaway server is started) or ``--dsn``:

    .venv/bin/python benchmarks/store.py [--quick] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import trio

# isort: off
import trio_asyncio  # before psycopg: it binds asyncio.get_running_loop at import
import psycopg

# isort: on

try:
    from benchmarks._table import Row, met, number, ratio
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from benchmarks._table import Row, met, number, ratio

from emelex.contracts import RowsPublished
from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.service import Host, ScaleOut
from emelex.store import Position, Store, open_sqlite_store
from emelex.store.postgres import PostgresStore, open_postgres_store
from emelex.store.postgres._connection import (
    DEFAULT_STATEMENT_SECONDS,
    connection_options,
)
from emelex.store.postgres._connection import connect as store_connection
from emelex.store.postgres._queries import page_query
from emelex.store.postgres._reader import TrioReader

TURN = [
    Message("user", "read the notes and summarize them"),
    Message("assistant", "I will read them first."),
    Message("assistant", "They say the build is green."),
    Message("assistant", "Summary: green build, nothing to do."),
]
#: The bare keyset query (the fence known), for the threads-against-asyncio comparison.
PAGE_QUERY = (
    "SELECT source_sequence, item_index, turn_id, role, internal, tool_name, tool_call_id,"
    " body, thinking, tool_calls, message FROM rows WHERE session_id=%s"
    " AND source_sequence<=%s AND (source_sequence, item_index) > (%s, %s)"
    " AND NOT internal ORDER BY source_sequence, item_index LIMIT %s"
)


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[tuple[str, Any]]:
    """``dsn``, or a throwaway server's fresh database (and the server, to make more)."""
    if dsn is not None:
        yield dsn, None
        return
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.postgres_server import running_postgres

    with running_postgres() as server:
        yield server.create_database(), server


@contextlib.asynccontextmanager
async def both(dsn: str, root: Path) -> AsyncIterator[tuple[Store, Store]]:
    async with (
        open_sqlite_store(str(root / "bench.db")) as sqlite,
        open_postgres_store(dsn) as postgres,
    ):
        yield sqlite, postgres


async def commits_per_second(store: Store, session_id: str, count: int) -> float:
    await store.create_session(session_id, "{}")
    start = time.perf_counter()
    for n in range(count):
        await store.append_turn(session_id, f"t{n}", TURN)
    return count / (time.perf_counter() - start)


async def pages_per_second(store: Store, session_id: str, count: int, rows: int) -> float:
    rng = random.Random(3)
    positions = [Position(rng.randrange(1, rows // 4 * 5), 0) for _ in range(count)]
    start = time.perf_counter()
    for after in positions:
        page = await store.history_page(session_id, after=after, limit=100)
        assert page.rows or after.source_sequence > rows
    return count / (time.perf_counter() - start)


def raw_connection(dsn: str) -> psycopg.Connection[Any]:
    """A connection with the store's connection settings, for the raw baseline."""
    return psycopg.connect(
        dsn,
        autocommit=True,
        options=connection_options(DEFAULT_STATEMENT_SECONDS),
        application_name="emelex",
    )


def raw_pages(
    db: psycopg.Connection[Any], session_id: str, after: list[int]
) -> tuple[float, float]:
    """The store's own page statement (fence and keyset rows in one round trip), run
    through psycopg on the calling thread, every row fetched as a tuple: what a page
    read costs before the store's own work. Returns (wall, process CPU) seconds."""
    query = page_query(include_internal=False)
    start, cpu = time.perf_counter(), time.process_time()
    for sequence in after:
        db.execute(query, (None, sequence, 0, 101, session_id)).fetchall()
    return time.perf_counter() - start, time.process_time() - cpu


async def page_against_raw(
    store: Store, dsn: str, session_id: str, count: int, rows: int, rounds: int = 10
) -> tuple[float, float, float, float]:
    """Store page reads and the raw statement, the same positions, in alternating rounds
    (a shared machine's load moves within a run: each side sees the same share of it).
    Returns per-page (store wall, raw wall, store CPU, raw CPU) seconds; CPU is this
    process's (the server's is the same statement either way)."""
    rng = random.Random(3)
    positions = [rng.randrange(1, rows // 4 * 5) for _ in range(count)]
    totals = [0.0, 0.0, 0.0, 0.0]
    db = await trio.to_thread.run_sync(raw_connection, dsn)
    try:
        for warm in positions[:20]:  # both sides prepared and warm before timing
            await store.history_page(session_id, after=Position(warm, 0), limit=100)
            await trio.to_thread.run_sync(raw_pages, db, session_id, [warm])
        for n in range(rounds):
            chunk = positions[n::rounds]
            for side in (0, 1) if n % 2 == 0 else (1, 0):
                if side == 1:
                    wall, cpu = await trio.to_thread.run_sync(raw_pages, db, session_id, chunk)
                else:
                    start, began = time.perf_counter(), time.process_time()
                    for sequence in chunk:
                        after = Position(sequence, 0)
                        page = await store.history_page(session_id, after=after, limit=100)
                        assert page.rows or sequence > rows
                    wall, cpu = time.perf_counter() - start, time.process_time() - began
                totals[side] += wall
                totals[2 + side] += cpu
    finally:
        db.close()
    return (totals[0] / count, totals[1] / count, totals[2] / count, totals[3] / count)


async def threads_against_asyncio(
    store: PostgresStore, dsn: str, session_id: str, count: int
) -> tuple[dict[int, float], dict[int, float], float]:
    """The same keyset query (no decoding) per second with 1 and 8 concurrent callers:
    on the store's worker threads (blocking psycopg, 4 connections) and through psycopg's
    async API on trio-asyncio (4 connections)."""
    threads: dict[int, float] = {}
    loop_based: dict[int, float] = {}

    def raw_page(db: psycopg.Connection[Any]) -> None:
        db.execute(PAGE_QUERY, (session_id, 10**9, 1, 0, 101)).fetchall()

    async def pool_caller(calls: int) -> None:
        for _ in range(calls):
            await store._run(raw_page)  # the store's own path: least busy worker thread

    for callers in (1, 8):
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(callers):
                nursery.start_soon(pool_caller, count // callers)
        threads[callers] = count / (time.perf_counter() - start)

    # The store's reads: libpq non-blocking on the Trio thread (one connection).
    reader = TrioReader(functools.partial(store_connection, dsn, DEFAULT_STATEMENT_SECONDS))
    native = (PAGE_QUERY % ("$1", "$2", "$3", "$4", "$5")).encode()
    try:
        start = time.perf_counter()
        for _ in range(count):
            await reader.fetch(b"bench_page", native, (session_id, 10**9, 1, 0, 101))
        on_trio = count / (time.perf_counter() - start)
    finally:
        reader.close()

    async def connect() -> psycopg.AsyncConnection[Any]:
        return await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    async with trio_asyncio.open_loop():
        connections = [await trio_asyncio.aio_as_trio(connect)() for _ in range(4)]

        async def page(db: psycopg.AsyncConnection[Any]) -> None:
            cursor = await db.execute(PAGE_QUERY, (session_id, 10**9, 1, 0, 101))
            await cursor.fetchall()

        async def caller(n: int, calls: int) -> None:
            db = connections[n % len(connections)]
            lock = locks[n % len(connections)]
            for _ in range(calls):
                async with lock:  # one statement at a time per connection
                    await trio_asyncio.aio_as_trio(page)(db)

        for callers in (1, 8):
            locks = [trio.Lock() for _ in connections]
            start = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(callers):
                    nursery.start_soon(caller, n, count // callers)
            loop_based[callers] = count / (time.perf_counter() - start)
        for db in connections:
            await trio_asyncio.aio_as_trio(db.close)()
    return threads, loop_based, on_trio


async def watch_latency_hosts(
    dsn: str, root: Path, commits: int, durations: list[float] | None = None
) -> list[float]:
    """A commit made on one connection (as another Host's turn) to the rows reaching a
    watcher of this Host (notification, event read, rows read, publish), counted from
    before the commit is sent; ``durations`` receives each commit's own time (the
    writer's share of the latency)."""
    from emelex.agent import DenyAll
    from emelex.app import Agent
    from emelex.testing import ScriptedModel

    agent = Agent.builder().name("helper").instructions("x").model(ScriptedModel([]))
    agents = {"helper": agent.approver(DenyAll()).build()}
    latencies: list[float] = []
    options = ScaleOut(lease_seconds=5, catch_up_seconds=1.0)
    async with (
        Host.open(root / "watcher", agents=agents, store=dsn, scale_out=options) as host,
        open_postgres_store(dsn, pool_size=1) as other,
    ):
        session = (await host.create_session("helper", root, operation="c")).session
        sent: dict[str, float] = {}
        async with host.watch(session.id) as updates:

            async def commit() -> None:
                for n in range(commits):
                    sent[f"m{n}"] = began = time.perf_counter()
                    await other.append_turn(session.id, f"t{n}", [Message("user", f"m{n}")])
                    if durations is not None:
                        durations.append(time.perf_counter() - began)
                    await trio.sleep(0.01)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(commit)
                async for update in updates:
                    if isinstance(update, RowsPublished):
                        now = time.perf_counter()
                        latencies += [now - sent[r.body] for r in update.rows]
                        if len(latencies) >= commits:
                            break
    return latencies


async def failover_seconds(dsn: str, root: Path, kills: int) -> tuple[list[float], list[float]]:
    """For each SIGKILL of the lease holder mid-turn: the seconds until another Host
    holds the session's lease, and until the session's next queue event (a resumed turn
    writes none when it is taken up, only when it finishes: 0.3 s turns here)."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from tests.service.test_failover import host_processes, log_of, mid_turn

    delays: list[float] = []
    takeovers: list[float] = []
    async with (
        open_postgres_store(dsn, pool_size=1) as store,
        host_processes(dsn, root) as start,
    ):
        children = [await start(f"h{n}", 0.3) for n in range(2)]
        for child in children:
            await child.wait_line("READY")
        await children[0].tell("CREATE create")
        line = await children[0].wait_line("SESSION")
        assert line is not None
        session_id = line.split()[1]
        count = 0
        for kill in range(kills):
            alive = [c for c in children if c.alive]
            holder = None
            while holder is None:
                for _ in range(3):
                    await alive[0].tell(f"SEND {session_id} op{count} task {count}")
                    await alive[0].wait_line(f"RECEIPT op{count} ")
                    count += 1
                holder = await mid_turn(store, session_id, {c.pid for c in alive})
            victim = next(c for c in alive if c.pid == int(holder.split(":")[1]))
            held = await store.lease_holder(session_id)
            assert held is not None
            killed = time.time()
            victim.process.kill()
            await victim.process.wait()
            children.remove(victim)
            replacement = await start(f"r{kill}", 0.3)
            with trio.fail_after(60):
                while True:  # polled: the database is the only witness of a takeover
                    now = await store.lease_holder(session_id)
                    if now is not None and now[1] != held[1]:
                        takeovers.append(time.time() - killed)
                        break
                    await trio.sleep(0.005)
                while True:
                    starts = [
                        e.at
                        for e in await log_of(store, session_id)
                        if e.kind in ("queue.started", "queue.finished") and e.at > killed
                    ]
                    if starts:
                        delays.append(min(starts) - killed)
                        break
                    await trio.sleep(0.02)
            await replacement.wait_line("READY")
            children.append(replacement)
    return takeovers, delays


def rows(quick: bool, dsn: str | None) -> list[Row]:
    commits = 100 if quick else 500
    reads = 200 if quick else 1000
    kills = 2 if quick else 5
    out: list[Row] = []
    with database(dsn) as (target, server), tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)

        async def measure() -> None:
            async with open_supervisor("bench"), both(target, root) as (sqlite, postgres):
                sqlite_rate = await commits_per_second(sqlite, "s1", commits)
                postgres_rate = await commits_per_second(postgres, "s1", commits)
                out.append(
                    Row(
                        "turn commits/s (4 rows each)",
                        number(postgres_rate, 0),
                        f"SQLite {number(sqlite_rate, 0)}",
                        ratio(postgres_rate / sqlite_rate, unit="speed"),
                    )
                )
                stored = commits * 4
                sqlite_pages = await pages_per_second(sqlite, "s1", reads, stored)
                postgres_pages = await pages_per_second(postgres, "s1", reads, stored)
                out.append(
                    Row(
                        "100-row page reads/s",
                        number(postgres_pages, 0),
                        f"SQLite {number(sqlite_pages, 0)}",
                        ratio(postgres_pages / sqlite_pages, unit="speed"),
                    )
                )
                ours, raw, ours_cpu, raw_cpu = await page_against_raw(
                    postgres, target, "s1", reads, stored
                )
                times = ours / raw
                out.append(
                    Row(
                        "page read vs raw keyset query (psycopg)",
                        f"{ours * 1e3:.2f} ms",
                        f"raw {raw * 1e3:.2f} ms",
                        ratio(times, unit="time"),
                        "≤ 1.5x",
                        met(times <= 1.5),
                        note=f"CPU {ours_cpu * 1e3:.2f} vs {raw_cpu * 1e3:.2f} ms"
                        f" ({ours_cpu / raw_cpu:.2f}x), 10 alternating rounds",
                    )
                )
                assert isinstance(postgres, PostgresStore)
                threads, loop_based, on_trio = await threads_against_asyncio(
                    postgres, target, "s1", reads // 2
                )
                out.append(
                    Row(
                        "psycopg from Trio, 1 caller: queries/s",
                        f"Trio thread (libpq non-blocking) {number(on_trio, 0)}",
                        f"threads {number(threads[1], 0)}",
                        ratio(on_trio / threads[1], unit="speed"),
                    )
                )
                for callers in (1, 8):
                    out.append(
                        Row(
                            f"psycopg from Trio, {callers} caller(s): queries/s",
                            f"threads {number(threads[callers], 0)}",
                            f"trio-asyncio {number(loop_based[callers], 0)}",
                            ratio(threads[callers] / loop_based[callers], unit="speed"),
                        )
                    )
            durations: list[float] = []
            async with open_supervisor("bench"):
                latencies = sorted(await watch_latency_hosts(target, root, reads // 2, durations))
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            durations.sort()
            commit_p99 = durations[int(len(durations) * 0.99) - 1]
            out.append(
                Row(
                    "watch latency across Hosts, p99",
                    f"{p99 * 1e3:.1f} ms",
                    f"p50 {statistics.median(latencies) * 1e3:.1f} ms",
                    goal="≤ 100 ms",
                    met=met(p99 <= 0.1),
                    note=f"the commit itself: p99 {commit_p99 * 1e3:.1f} ms",
                )
            )
            fresh = server.create_database() if server is not None else target
            async with open_supervisor("bench"):
                takeovers, delays = await failover_seconds(fresh, root / "failover", kills)
            measured = (
                ("to another Host holding the session", takeovers, f"{kills} kills"),
                (
                    "to next turn on another Host",
                    delays,
                    f"{kills} kills; a resumed turn's first event is its end",
                ),
            )
            for what, seconds, note in measured:
                out.append(
                    Row(
                        f"failover: SIGKILL {what} (max)",
                        f"{max(seconds):.2f} s",
                        f"p50 {statistics.median(seconds):.2f} s",
                        goal="≤ lease 1 s + 1 s",
                        met=met(max(seconds) <= 2.0),
                        note=note,
                    )
                )

        trio.run(measure)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer commits, reads, kills")
    parser.add_argument("--dsn", help="an existing database (default: a throwaway server)")
    args = parser.parse_args()
    for row in rows(args.quick, args.dsn):
        print(row)


if __name__ == "__main__":
    main()
