"""Several Hosts in one process on one PostgreSQL database: any Host admits, the lease
holder runs, every Host serves reads and watches, receipts are exactly-once."""

from __future__ import annotations

import random
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import HistoryRow, QueueChanged, RowsPublished, WatchEnded
from emelex.runtime import open_supervisor
from emelex.service import STORE_ENV, Host, ScaleOut, ServiceError, store_from_environment
from emelex.store import StoredEvent
from emelex.store.postgres import open_postgres_store
from emelex.testing import Say, ScriptedModel

FAST = ScaleOut(lease_seconds=1.0, catch_up_seconds=0.2)


def agent(turns: int = 50) -> Agent:
    model = ScriptedModel([[Say(f"answer {n}")] for n in range(turns)])
    return (
        Agent.builder()
        .name("helper")
        .instructions("Help.")
        .model(model)
        .approver(DenyAll())
        .build()
    )


async def known_everywhere(hosts: list[Host], session_id: str) -> None:
    # Other Hosts learn of it through the database: no in-process event to wait on.
    with trio.fail_after(20):
        while True:
            known = [any(s.id == session_id for s in await h.sessions()) for h in hosts]
            if all(known):
                return
            await trio.sleep(0.02)


async def rows_seen(host: Host, session_id: str, count: int, out: list[HistoryRow]) -> None:
    async with host.watch(session_id) as updates:
        async for update in updates:
            if isinstance(update, RowsPublished):
                out.extend(update.rows)
                if len(out) >= count:
                    return
            assert not isinstance(update, WatchEnded), update


async def all_events(dsn: str, session_id: str) -> list[StoredEvent]:
    async with open_postgres_store(dsn, pool_size=1) as store:
        events: list[StoredEvent] = []
        while batch := await store.events_after(
            session_id, events[-1].sequence if events else 0, limit=1000
        ):
            events.extend(batch)
        return events


async def test_sends_through_any_host_run_once_and_every_host_watches_them(
    postgres_dsn: str, tmp_path: Path
) -> None:
    sends = 8
    async with (
        open_supervisor("cluster"),
        Host.open(
            tmp_path / "a", agents={"helper": agent()}, store=postgres_dsn, scale_out=FAST
        ) as a,
        Host.open(
            tmp_path / "b", agents={"helper": agent()}, store=postgres_dsn, scale_out=FAST
        ) as b,
        Host.open(
            tmp_path / "c", agents={"helper": agent()}, store=postgres_dsn, scale_out=FAST
        ) as c,
    ):
        hosts = [a, b, c]
        session = (await a.create_session("helper", tmp_path, operation="create")).session
        await known_everywhere(hosts, session.id)
        seen: dict[str, list[HistoryRow]] = {"b": [], "c": []}
        rng = random.Random(7)
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rows_seen, b, session.id, 2 * sends, seen["b"])
                nursery.start_soon(rows_seen, c, session.id, 2 * sends, seen["c"])
                receipts = []
                for n in range(sends):
                    host = rng.choice(hosts)
                    receipts.append(await host.send(session.id, f"task {n}", operation=f"s{n}"))
                    # A retry through another Host gets the same receipt, admits nothing.
                    again = await rng.choice(hosts).send(session.id, f"task {n}", operation=f"s{n}")
                    assert again == receipts[-1]
        for rows in seen.values():
            positions = [(r.position.source_sequence, r.position.item_index) for r in rows]
            assert positions == sorted(set(positions))  # every row once, in order
            assert [r.body for r in rows if r.role == "user"] == [f"task {n}" for n in range(sends)]
        events = await all_events(postgres_dsn, session.id)
        admitted = Counter(e.payload["operation"] for e in events if e.kind == "queue.admitted")
        assert admitted == {f"s{n}": 1 for n in range(sends)}
        started = [e.payload["invocationId"] for e in events if e.kind == "queue.started"]
        assert sorted(started) == sorted(r.invocation_id for r in receipts)
        assert len(set(started)) == sends
        # Every Host reads the same history.
        pages = [await h.history(session.id, limit=100) for h in hosts]
        assert all(p.rows == pages[0].rows for p in pages) and len(pages[0].rows) == 2 * sends


async def test_a_closed_holder_hands_its_sessions_over_at_once(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with open_supervisor("cluster"):
        slow = ScaleOut(lease_seconds=30.0, catch_up_seconds=0.2)
        async with Host.open(
            tmp_path / "b", agents={"helper": agent()}, store=postgres_dsn, scale_out=slow
        ) as b:
            async with Host.open(
                tmp_path / "a", agents={"helper": agent()}, store=postgres_dsn, scale_out=slow
            ) as a:
                session = (await a.create_session("helper", tmp_path, operation="c")).session
                await a.send(session.id, "first", operation="s1")
                await idle(a, session.id)
            # a released its lease when it closed: b runs the next send without waiting
            # the 30 s lease out.
            await known_everywhere([b], session.id)
            with trio.fail_after(25):  # far below the 30 s lease: it was released
                await b.send(session.id, "second", operation="s2")
                await idle(b, session.id)
            page = await b.history(session.id)
            assert [r.body for r in page.rows] == ["first", "answer 0", "second", "answer 0"]


async def idle(host: Host, session_id: str) -> None:
    with trio.fail_after(30):
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, QueueChanged) and not update.queue.entries:
                    return


async def test_scale_out_needs_a_postgres_store(tmp_path: Path) -> None:
    with pytest.raises(ServiceError, match="PostgreSQL"):
        async with Host.open(tmp_path / "h", agents={"helper": agent()}, scale_out=FAST):
            pass
    with pytest.raises(ServiceError, match="connection string"):
        async with Host.open(tmp_path / "h", agents={"helper": agent()}, store="/tmp/x.db"):
            pass
    with pytest.raises(ValueError, match="lease_seconds"):
        ScaleOut(lease_seconds=0)


def test_the_store_comes_from_the_option_then_the_environment() -> None:
    dsn = "postgresql://emelex@db/emelex"
    assert store_from_environment(dsn, {STORE_ENV: "postgresql://other/x"}) == dsn
    assert store_from_environment(None, {STORE_ENV: " postgresql:// "}) == "postgresql://"
    assert store_from_environment(None, {STORE_ENV: ""}) is None
    assert store_from_environment(None, {}) is None


async def test_a_single_host_on_postgres_recovers_like_on_sqlite(
    postgres_dsn: str, tmp_path: Path
) -> None:
    async with open_supervisor("cluster"):
        async with Host.open(tmp_path / "a", agents={"helper": agent()}, store=postgres_dsn) as a:
            session = (await a.create_session("helper", tmp_path, operation="c")).session
            await a.send(session.id, "first", operation="s1")
            await idle(a, session.id)
        async with Host.open(tmp_path / "b", agents={"helper": agent()}, store=postgres_dsn) as b:
            assert [s.id for s in (await b.sessions())] == [session.id]
            page = await b.history(session.id)
            assert [r.body for r in page.rows] == ["first", "answer 0"]


def test_a_sqlite_host_never_imports_psycopg(tmp_path: Path) -> None:
    """The postgres extra is optional: one Host on its SQLite file runs without it."""
    script = (
        "import sys, trio\n"
        "from emelex.service import Host\n"
        "from emelex.app import Agent\n"
        "from emelex.testing import ScriptedModel\n"
        "agent = Agent.builder().name('h').instructions('x').model(ScriptedModel([])).build()\n"
        "async def main():\n"
        f"    async with Host.open({str(tmp_path)!r}, agents={{'helper': agent}}):\n"
        "        pass\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith(('psycopg', 'emelex.store.post'))))\n"
    )
    root = Path(__file__).parents[2]
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
