"""kill -9 of a Host process whose turns resume after a restart, at random points
(model streaming, approvals pending, tools running), on SQLite and PostgreSQL: every
invocation finishes exactly once, no tool call runs twice, receipts are honoured and
the history stays whole.

Each root goes through several kill/restart cycles of ``crash_resume_child.py``, then
an in-process Host drains the queue. ``EMELEX_CRASH_RESUME_TRIALS`` sets the number of
kills per store (default 30); ``EMELEX_CRASH_REPORT`` names a file for the counts of
where the kills landed.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent._turn_rules import INTERRUPTED
from emelex.contracts import ApproveResponse
from emelex.service import Host
from emelex.store import StoredEvent, open_sqlite_store
from tests.postgres_server import PostgresServer

from .crash_resume_child import LEDGER, resume_agent

TRIALS = int(os.environ.get("EMELEX_CRASH_RESUME_TRIALS", "30"))
KILLS_PER_ROOT = 5
MAX_RESUMES = 3
#: Where the kills landed, per store, over the whole run.
LANDED: dict[str, Counter[str]] = {}
VIOLATIONS: list[str] = []
#: Events that say nothing about where a running turn stands.
QUIET = {"queue.admitted", "diagnostic.recorded", "session.created", "request.settled"}


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest) -> Callable[[], str | None]:
    """Makes the store of one root: None (its SQLite file) or a fresh PostgreSQL
    database (the first from ``postgres_dsn``, the others from its server)."""
    if request.param == "sqlite":
        return lambda: None
    first: list[str] = [request.getfixturevalue("postgres_dsn")]
    server: PostgresServer = request.getfixturevalue("postgres_server")
    return lambda: first.pop() if first else server.create_database()


@asynccontextmanager
async def opened(root: Path, dsn: str | None) -> AsyncIterator[Any]:
    if dsn is None:
        async with open_sqlite_store(str(root / "host.db")) as store:
            yield store
    else:
        from emelex.store.postgres import open_postgres_store

        async with open_postgres_store(dsn) as store:
            yield store


async def all_events(root: Path, dsn: str | None) -> list[StoredEvent]:
    if dsn is None and not (root / "host.db").exists():
        return []
    async with opened(root, dsn) as store:
        sessions = await store.list_sessions()
        if not sessions:
            return []
        (session,) = sessions
        events: list[StoredEvent] = []
        after = 0
        while batch := await store.events_after(session.id, after, limit=1000):
            events.extend(batch)
            after = batch[-1].sequence
        return events


def landed(events: list[StoredEvent]) -> str:
    """Where a kill landed, from the store it left behind."""
    started = [e.payload["invocationId"] for e in events if e.kind == "queue.started"]
    finished = {e.payload["invocationId"] for e in events if e.kind == "queue.finished"}
    running = [i for i in started if i not in finished]
    if not running:
        admitted = {e.payload["invocationId"] for e in events if e.kind == "queue.admitted"}
        return "queued" if admitted - finished else "idle"
    requested = {e.payload["id"] for e in events if e.kind == "interaction.requested"}
    resolved = {e.payload["id"] for e in events if e.kind == "interaction.resolved"}
    if requested - resolved:
        return "pending-approval"
    last = [e for e in events if e.kind not in QUIET][-1]
    if last.kind == "turn.journal":
        return journal_point(last.payload)
    if last.kind in {"queue.started", "queue.resumed", "request.prepared", "queue.stop"}:
        return "streaming"
    if last.kind == "interaction.resolved":
        return "approved, before its tool"
    return f"after {last.kind}"


def journal_point(payload: dict[str, Any]) -> str:
    """Which progress record was the last: after a batch (it reached the store with a
    later write), before a tool start (its call reads as interrupted; a kill while the
    next round streams lands here too), or before an approval (the call is open)."""
    if payload.get("betweenRounds"):
        return "streaming, after a batch"
    messages = payload["messages"]
    roles = [m.get("data", {}).get("role") for m in messages]
    batch_at = max(i for i, role in enumerate(roles) if role in ("user", "assistant"))
    if INTERRUPTED in json.dumps(messages[batch_at:]):
        return "tool-running"
    return "asking-approval"


async def run_and_kill(
    root: Path, workspace: Path, run: int, dsn: str | None, delay: float
) -> list[str]:
    """Start a Host child, SIGKILL it ``delay`` seconds after its Host is up, return
    what it printed."""
    repo = Path(__file__).parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo))
    argv = [str(root), str(workspace), str(run), dsn or "-"]
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.service.crash_resume_child", *argv],
        stdout=subprocess.PIPE,
        env=env,
        cwd=str(repo),
    )
    assert process.stdout is not None
    output = bytearray()
    with trio.move_on_after(60):
        while b"SESSION" not in output and (chunk := await process.stdout.receive_some(65536)):
            output += chunk
    with trio.move_on_after(delay):
        while chunk := await process.stdout.receive_some(65536):
            output += chunk
    process.send_signal(signal.SIGKILL)
    with trio.fail_after(30):
        await process.wait()
        while chunk := await process.stdout.receive_some(65536):
            output += chunk
    await process.stdout.aclose()
    return output.decode().splitlines()


async def drain(root: Path, workspace: Path, dsn: str | None, receipts: dict[str, str]) -> None:
    agents = {"helper": resume_agent(workspace)}
    async with Host.open(root, agents=agents, store=dsn) as host:
        created = await host.create_session("helper", workspace, operation="create")
        session_id = created.session.id
        for operation, invocation in receipts.items():
            number = int(operation.removeprefix("send-"))
            again = await host.send(session_id, f"task {number}", operation=operation)
            if again.invocation_id != invocation:
                VIOLATIONS.append(f"{operation}: receipt {again.invocation_id} != {invocation}")
        with trio.fail_after(180):
            while (await host.queue(session_id)).entries:
                for interaction in (await host.pending_interactions(session_id)).interactions:
                    await host.respond(
                        session_id,
                        interaction.id,
                        ApproveResponse(),
                        operation=f"drain-{interaction.id}",
                    )
                await trio.sleep(0.02)  # a bounded wait for the runner, not an ordering proof


def check_history(rows: list[Any], where: str) -> set[str]:
    """Every assistant tool call has exactly one result row after it; each turn's rows
    form one block. Returns the call ids of the history."""
    calls: set[str] = set()
    results = Counter(r.message().tool_call_id for r in rows if r.message().role == "tool")
    for index, row in enumerate(rows):
        message = row.message()
        for call in message.tool_calls:
            calls.add(call.id)
            later = [r for r in rows[index + 1 :] if r.message().tool_call_id == call.id]
            if len(later) != 1 or results[call.id] != 1:
                VIOLATIONS.append(f"{where}: call {call.id} has {results[call.id]} results")
    strays = set(results) - calls
    if strays:
        VIOLATIONS.append(f"{where}: results without calls {strays}")
    blocks = [r.turn_id for i, r in enumerate(rows) if i == 0 or rows[i - 1].turn_id != r.turn_id]
    twice = [t for t, n in Counter(blocks).items() if n > 1]
    if twice:
        VIOLATIONS.append(f"{where}: turns committed in pieces {twice}")
    return calls


async def check_invariants(
    root: Path, workspace: Path, dsn: str | None, receipts: dict[str, str]
) -> None:
    where = str(root.name)
    events = await all_events(root, dsn)
    admitted = {e.payload["invocationId"] for e in events if e.kind == "queue.admitted"}
    finished = Counter(e.payload["invocationId"] for e in events if e.kind == "queue.finished")
    if set(finished) != admitted or any(n != 1 for n in finished.values()):
        VIOLATIONS.append(f"{where}: admitted {len(admitted)}, finished {dict(finished)}")
    resumed = Counter(e.payload["invocationId"] for e in events if e.kind == "queue.resumed")
    if any(n > MAX_RESUMES for n in resumed.values()):
        VIOLATIONS.append(f"{where}: resumed too often {dict(resumed)}")
    stopped = {e.payload.get("invocationId") for e in events if e.kind == "queue.stop"}
    for end in (e for e in events if e.kind == "queue.finished"):
        invocation = end.payload["invocationId"]
        early = resumed[invocation] < MAX_RESUMES and invocation not in stopped
        if end.payload["outcome"] == "interrupted" and early:
            VIOLATIONS.append(f"{where}: {invocation} interrupted after {resumed[invocation]}")
    async with opened(root, dsn) as store:
        (session,) = await store.list_sessions()
        rows: list[Any] = []
        after = None
        while True:
            page = await store.history_page(
                session.id, after=after, limit=1000, include_internal=True
            )
            rows.extend(page.rows)
            if (after := page.next_after) is None:
                break
        calls = check_history(rows, where)
        for operation, invocation in receipts.items():
            stored = await store.operation_receipt(session.id, operation)
            if stored is None or json.loads(stored)["invocationId"] != invocation:
                VIOLATIONS.append(f"{where}: {operation} receipt {stored} != {invocation}")
    ledger = (workspace / LEDGER).read_text().split() if (workspace / LEDGER).exists() else []
    twice = [line for line, n in Counter(ledger).items() if n > 1]
    if twice:
        VIOLATIONS.append(f"{where}: tool calls ran twice {twice}")
    if set(ledger) - calls:
        VIOLATIONS.append(f"{where}: ledger lines not in history {set(ledger) - calls}")


def write_report() -> None:
    lines = [f"{store}: {dict(sorted(counts.items()))}" for store, counts in LANDED.items()]
    lines.append(f"kills: {sum(sum(c.values()) for c in LANDED.values())}")
    lines.append(f"violations: {len(VIOLATIONS)}")
    print("\n".join(lines))
    if path := os.environ.get("EMELEX_CRASH_REPORT"):
        Path(path).write_text("\n".join(lines) + "\n")


async def test_kill_9_while_turns_resume(
    tmp_path: Path, fresh_store: Callable[[], str | None], request: pytest.FixtureRequest
) -> None:
    rng = random.Random(int(os.environ.get("EMELEX_CRASH_SEED", "2828")))
    counts = LANDED.setdefault(request.node.callspec.params["fresh_store"], Counter())
    VIOLATIONS.clear()
    for number in range(max(1, TRIALS // KILLS_PER_ROOT)):
        root = tmp_path / f"host-{number}"
        workspace = tmp_path / f"work-{number}"
        workspace.mkdir()
        dsn = fresh_store()
        receipts: dict[str, str] = {}
        for run in range(KILLS_PER_ROOT):
            lines = await run_and_kill(root, workspace, run, dsn, rng.uniform(0.0, 2.0))
            for line in lines:
                if line.startswith("RECEIPT "):
                    _, operation, invocation = line.split()
                    if receipts.setdefault(operation, invocation) != invocation:
                        VIOLATIONS.append(f"{operation}: receipt changed to {invocation}")
            counts[landed(await all_events(root, dsn))] += 1
        await drain(root, workspace, dsn, receipts)
        await check_invariants(root, workspace, dsn, receipts)
    write_report()
    assert VIOLATIONS == []
