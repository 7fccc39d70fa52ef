"""The Host against the raw store and the tools users compare it with, in the same run.

- history: a page of 100 rows at 1,000,000 stored rows through ``Host.history`` against
  the same keyset query run directly on the SQLite file (goal ≤ 2x time);
- watch fan-out: one commit (a send's admission) to 1,000 watchers, p99 from the send to
  each watcher's update (goal ≤ 50 ms);
- send admissions per second (durable, each with its receipt) against raw SQLite commits
  of the same size;
- search: ``Host.search`` paging through 100 MiB of history against ``rg -j1 -F`` over the
  same text exported to files, the best of five rounds of each (goal ≤ 3x time).

    .venv/bin/python benchmarks/service.py [--quick] [--rows N] [--mib N]

The full sizes (the default: 1,000,000 history rows, 100 MiB searched) take several
minutes to build; ``--quick`` uses 100,000 rows and 10 MiB, and ``--rows``/``--mib`` set
either size explicitly.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
import trio.testing

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import Position, QueueChanged, SearchCursor
from emelex.model import Message
from emelex.service import Host
from emelex.store import NewEvent, open_sqlite_store
from emelex.testing import ScriptedModel, Wait

try:
    from benchmarks._table import Row, met, number, ratio
except ImportError:  # run as a script
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from benchmarks._table import Row, met, number, ratio

WORDS = [
    "the",
    "agent",
    "reads",
    "a",
    "file",
    "and",
    "proposes",
    "a",
    "tool",
    "call",
    "handler",
    "résumé",
    "Straße",
    "café",
]


def idle_agent() -> Agent:
    # The runner waits in its first turn, so admissions measure the queue, not turns.
    model = ScriptedModel([[Wait(3600)]])
    builder = Agent.builder().name("bench").instructions("x").model(model)
    return builder.approver(DenyAll()).build()


def row_text(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    length = 0
    while length < chars:
        word = rng.choice(WORDS) if rng.random() > 0.0005 else "RareNeedle"
        words.append(word)
        length += len(word) + 1
    return " ".join(words)


async def fill(root: Path, workspace: Path, rows: int, chars: int) -> tuple[str, list[str]]:
    """A Host session holding ``rows`` history rows (written straight to the store)."""
    async with Host.open(root, agents={"bench": idle_agent()}) as host:
        created = await host.create_session("bench", workspace, operation="create")
    session_id = created.session.id
    rng = random.Random(7)
    texts: list[str] = []
    async with open_sqlite_store(str(root / "host.db")) as store:
        batch: list[NewEvent] = []
        for n in range(rows):
            text = row_text(rng, chars)
            texts.append(text)
            message = Message.user(text) if n % 2 == 0 else Message.assistant(text)
            batch.append(NewEvent("turn.input", f"t{n // 2}", rows=(message,)))
            if len(batch) == 2000:
                await store.append_events(session_id, batch)
                batch = []
        if batch:
            await store.append_events(session_id, batch)
    return session_id, texts


async def history_rows(root: Path, session_id: str, rows: int, repeat: int) -> list[Row]:
    path = root / "host.db"
    rng = random.Random(3)
    starts = [rng.randrange(2, rows) for _ in range(repeat)]
    db = sqlite3.connect(path)

    def raw(start: int) -> float:
        began = time.perf_counter()
        db.execute(
            "SELECT source_sequence, item_index, turn_id, role, internal, tool_name,"
            " tool_call_id, body, thinking, message FROM rows WHERE session_id=?"
            " AND source_sequence <= ? AND (source_sequence, item_index) > (?, ?)"
            " ORDER BY source_sequence, item_index LIMIT ?",
            (session_id, rows + 10, start, 0, 101),
        ).fetchall()
        return time.perf_counter() - began

    raw_times = [raw(s) for s in starts]
    db.close()
    ours: list[float] = []
    async with Host.open(root, agents={"bench": idle_agent()}) as host:
        fence = (await host.history(session_id, limit=1)).through
        for start in starts:
            began = time.perf_counter()
            page = await host.history(
                session_id,
                through=fence,
                after=Position(source_sequence=start, item_index=0),
                limit=100,
            )
            ours.append(time.perf_counter() - began)
            assert len(page.rows) == 100
    our, anchor = statistics.median(ours), statistics.median(raw_times)
    times = our / anchor
    print(f"history page: host {our * 1e3:.2f} ms, raw {anchor * 1e3:.2f} ms, {times:.2f}x")
    return [
        Row(
            f"history page of 100 rows at {rows:,} rows (median of {repeat})",
            f"{our * 1e3:.2f} ms",
            f"{anchor * 1e3:.2f} ms raw SQLite keyset",
            ratio(times),
            "≤ 2x",
            met(times <= 2),
        )
    ]


async def fan_out(root: Path, workspace: Path, watchers: int) -> list[Row]:
    latencies: list[float] = []
    gc.collect()  # the history Host before this one left garbage; not ours to time
    async with Host.open(
        root, agents={"bench": idle_agent()}, queue_capacity=10_000, watch_buffer=64
    ) as host:
        session_id = (await host.create_session("bench", workspace, operation="c")).session.id
        ready = 0
        all_ready = trio.Event()
        sent_at: list[float] = []

        async def watcher() -> None:
            nonlocal ready
            async with host.watch(session_id) as updates:
                async for update in updates:
                    if isinstance(update, QueueChanged):
                        if not sent_at:
                            ready += 1
                            if ready == watchers:
                                all_ready.set()
                            continue
                        latencies.append(trio.current_time() - sent_at[0])
                        return

        async with trio.open_nursery() as nursery:
            for _ in range(watchers):
                nursery.start_soon(watcher)
            await all_ready.wait()
            sent_at.append(trio.current_time())
            await host.send(session_id, "go", operation="send")
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]
    bare = await bare_fan_out(watchers)
    print(
        f"fan-out to {watchers}: p50 {p50 * 1e3:.1f} ms, p99 {p99 * 1e3:.1f} ms;"
        f" bare Trio p99 {bare * 1e3:.1f} ms"
    )
    return [
        Row(
            f"watch fan-out, one commit to {watchers:,} watchers, p99 (p50 {p50 * 1e3:.1f} ms)",
            f"{p99 * 1e3:.1f} ms",
            f"{bare * 1e3:.1f} ms bare Trio Event to {watchers:,} tasks",
            ratio(p99 / bare),
            "≤ 50 ms",
            met(p99 <= 0.050),
        )
    ]


async def bare_fan_out(watchers: int) -> float:
    """p99 of one trio.Event waking ``watchers`` tasks that each record the time."""
    # Runs right after a Host closed: collect its garbage now, or a full collection can
    # land inside this sub-millisecond measurement (it did: 5 ms became 90 ms).
    gc.collect()
    event = trio.Event()
    latencies: list[float] = []
    set_at: list[float] = []

    async def wait() -> None:
        await event.wait()
        latencies.append(trio.current_time() - set_at[0])

    async with trio.open_nursery() as nursery:
        for _ in range(watchers):
            nursery.start_soon(wait)
        await trio.testing.wait_all_tasks_blocked()
        set_at.append(trio.current_time())
        event.set()
    latencies.sort()
    return latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))]


async def admissions(root: Path, workspace: Path, count: int) -> list[Row]:
    async with Host.open(root, agents={"bench": idle_agent()}, queue_capacity=count + 1) as host:
        session_id = (await host.create_session("bench", workspace, operation="c")).session.id
        began = time.perf_counter()
        for n in range(count):
            await host.send(session_id, f"task {n}", operation=f"send-{n}")
        ours = time.perf_counter() - began
    path = root / "raw.db"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE e (s INTEGER PRIMARY KEY, payload TEXT)")
    db.execute("CREATE TABLE o (ref TEXT PRIMARY KEY, receipt TEXT)")
    began = time.perf_counter()
    for n in range(count):
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT INTO e VALUES (?, ?)", (n, f'{{"text": "task {n}"}}'))
        db.execute("INSERT INTO o VALUES (?, ?)", (f"send-{n}", "{}"))
        db.execute("COMMIT")
    raw = time.perf_counter() - began
    db.close()
    rate, raw_rate = count / ours, count / raw
    print(f"admissions: {rate:,.0f}/s, raw SQLite {raw_rate:,.0f}/s")
    return [
        Row(
            f"send admissions/s ({count:,} durable sends with receipts)",
            f"{number(rate, 0)}/s",
            f"{number(raw_rate, 0)}/s raw SQLite commits",
            ratio(rate / raw_rate, unit="speed"),
        )
    ]


#: Rounds of each search, ours and ripgrep's; the best of each is compared.
SEARCH_ROUNDS = 5
#: The searches compared: Host options and the matching ripgrep flags. The goal (≤ 3x)
#: is the issue's, against ``rg -j1 -F`` itself: the first row. Any case and whole words
#: are measured beside it against ripgrep doing the same.
SEARCHES = (
    ("RareNeedle", {"case_sensitive": True}, (), "rare literal"),
    ("rareneedle", {"case_sensitive": False}, ("-i",), "rare literal, any case"),
    ("RareNeedle", {"case_sensitive": True, "whole_word": True}, ("-w",), "rare whole word"),
)


async def search(root: Path, session_id: str, texts: list[str], mib: int) -> list[Row]:
    rg = shutil.which("rg")
    if rg is None:
        return [
            Row.skipped(f"search {mib} MiB of history, {name}", "rg not installed", "≤ 3x")
            for _q, _o, _f, name in SEARCHES
        ]
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        for index in range(0, len(texts), 1000):
            chunk = "\n".join(texts[index : index + 1000]) + "\n"
            (folder / f"rows{index // 1000:05d}.txt").write_text(chunk, encoding="utf-8")
        async with Host.open(root, agents={"bench": idle_agent()}) as host:
            for query, options, flags, name in SEARCHES:
                argv = [rg, "-j1", "-F", *flags, "--no-filename", "--count-matches", "-e", query]
                # Best of a few rounds each, interleaved: both sides vary by a third
                # from run to run here (the page cache, other tenants, a full garbage
                # collection landing in one of ours).
                ours = theirs = float("inf")
                for _round in range(SEARCH_ROUNDS):
                    took, hits = await search_all(host, session_id, query, options)
                    ours = min(ours, took)
                    began = time.perf_counter()
                    done = await trio.run_process(
                        [*argv, "."], cwd=folder, capture_stdout=True, check=False
                    )
                    theirs = min(theirs, time.perf_counter() - began)
                rg_hits = sum(int(line) for line in done.stdout.decode().split())
                times = ours / theirs
                print(
                    f"search {name}: host {ours:.3f} s ({hits} hits),"
                    f" rg {theirs:.3f} s ({rg_hits}), {times:.2f}x (best of {SEARCH_ROUNDS})"
                )
                out.append(
                    Row(
                        f"search {mib} MiB of history, {name} (best of {SEARCH_ROUNDS})",
                        f"{ours * 1e3:.0f} ms",
                        f"{theirs * 1e3:.0f} ms rg -j1 -F {' '.join(flags)}".rstrip(),
                        ratio(times),
                        "≤ 3x" if not flags else "—",
                        met(times <= 3) if not flags else "n/a",
                        "" if hits == rg_hits else f"hits differ: emelex {hits}, rg {rg_hits}",
                    )
                )
    return out


async def search_all(
    host: Host, session_id: str, query: str, options: dict[str, bool]
) -> tuple[float, int]:
    """Seconds to page through every hit of ``query``, and the number of hits."""
    began = time.perf_counter()
    hits = 0
    after: SearchCursor | None = None
    through: int | None = None
    while True:
        page = await host.search(session_id, query, through=through, after=after, **options)
        hits += len(page.hits)
        through = page.through
        if page.next_after is None:
            return time.perf_counter() - began, hits
        after = page.next_after


async def measure(quick: bool, rows: int | None = None, mib: int | None = None) -> list[Row]:
    rows = rows or (100_000 if quick else 1_000_000)
    mib = mib or (10 if quick else 100)
    out: list[Row] = []
    with tempfile.TemporaryDirectory() as temp:
        base = Path(temp)
        workspace = base / "work"
        workspace.mkdir()
        session_id, _ = await fill(base / "history", workspace, rows, 60)
        out += await history_rows(base / "history", session_id, rows, 5 if quick else 25)
        out += await fan_out(base / "fanout", workspace, 1000)
        out += await admissions(base / "send", workspace, 200 if quick else 2000)
        chars = 1000
        search_rows = mib * 1024 * 1024 // chars
        session_id, texts = await fill(base / "search", workspace, search_rows, chars)
        out += await search(base / "search", session_id, texts, mib)
    return out


def rows(quick: bool, history_rows: int | None = None, mib: int | None = None) -> list[Row]:
    return trio.run(measure, quick, history_rows, mib)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="100,000 rows, 10 MiB")
    parser.add_argument("--rows", type=int, help="history rows stored (default 1,000,000)")
    parser.add_argument("--mib", type=int, help="MiB of history searched (default 100)")
    args = parser.parse_args()
    for row in rows(args.quick, args.rows, args.mib):
        print(row)


if __name__ == "__main__":
    main()
