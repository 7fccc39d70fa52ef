"""kill -9 of a Host process at random points, then restart: committed turns stay whole,
receipts are honoured, nothing is admitted twice, interrupted work is settled.

Each root goes through several kill/restart cycles of ``crash_child.py`` (which sends the
same operations again after every restart, as a client retrying lost responses would),
then one final in-process Host drains the queue. ``EMELEX_CRASH_TRIALS`` sets the number
of kills (default 100).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import trio

from emelex.contracts import ApproveResponse
from emelex.service import Host
from emelex.store import StoredEvent, open_sqlite_store

from .crash_child import SENDS, crash_agent

TRIALS = int(os.environ.get("EMELEX_CRASH_TRIALS", "100"))
KILLS_PER_ROOT = 5
CHILD = Path(__file__).with_name("crash_child.py")
#: Interrupted invocations seen across the trials, by how recovery settled them.
CHECKPOINTED: list[str] = []
ROLLED_BACK: list[str] = []


async def run_and_kill(root: Path, workspace: Path, run: int, delay: float) -> list[str]:
    """Start a Host child, SIGKILL it ``delay`` seconds after its Host is up, return
    what it printed."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2]))
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.service.crash_child", str(root), str(workspace), str(run)],
        stdout=subprocess.PIPE,
        env=env,
        cwd=str(Path(__file__).parents[2]),
    )
    assert process.stdout is not None
    output = bytearray()
    # Start the clock once the Host is up (interpreter start-up varies with load).
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


async def check_store(path: Path, receipts: dict[str, str]) -> None:
    async with open_sqlite_store(str(path)) as store:
        sessions = await store.list_sessions()
        if not sessions:
            return
        (session,) = sessions
        events: list[StoredEvent] = []
        after = 0
        while batch := await store.events_after(session.id, after, limit=1000):
            events.extend(batch)
            after = batch[-1].sequence
        admitted = Counter(e.payload["operation"] for e in events if e.kind == "queue.admitted")
        assert all(count == 1 for count in admitted.values()), admitted
        settled = {e.turn_id for e in events if e.kind == "turn.settled"}
        page = await store.history_page(session.id, limit=1000, include_internal=True)
        assert {row.turn_id for row in page.rows} <= settled
        for operation, invocation in receipts.items():
            stored = await store.operation_receipt(session.id, operation)
            assert stored is not None, f"{operation} was answered but not stored"
            assert json.loads(stored)["invocationId"] == invocation


async def drain(root: Path, workspace: Path, receipts: dict[str, str]) -> None:
    async with Host.open(root, agents={"helper": crash_agent()}) as host:
        created = await host.create_session("helper", workspace, operation="create")
        session_id = created.session.id
        for operation, invocation in receipts.items():
            number = int(operation.removeprefix("send-"))
            again = await host.send(session_id, f"task {number}", operation=operation)
            assert again.invocation_id == invocation
        with trio.fail_after(120):
            while (await host.queue(session_id)).entries:
                for interaction in (await host.pending_interactions(session_id)).interactions:
                    await host.respond(
                        session_id,
                        interaction.id,
                        ApproveResponse(),
                        operation=f"drain-{interaction.id}",
                    )
                await trio.sleep(0.02)  # a bounded wait for the runner, not an ordering proof
        assert (await host.pending_interactions(session_id)).interactions == ()
    async with open_sqlite_store(str(root / "host.db")) as store:
        events = await store.events_after(session_id, 0, limit=1000)
    admitted = {e.payload["invocationId"] for e in events if e.kind == "queue.admitted"}
    finished = {e.payload["invocationId"] for e in events if e.kind == "queue.finished"}
    assert admitted == finished
    # Harness rules after a crash: an interrupted turn whose tool may have run (it has a
    # journal entry) is checkpointed with exactly the journalled rows; others roll back.
    journals = {e.payload["invocationId"]: e for e in events if e.kind == "turn.journal"}
    for end in (e for e in events if e.kind == "queue.finished"):
        if end.payload["outcome"] != "interrupted":
            continue
        invocation = end.payload["invocationId"]
        settled = [e for e in events if e.kind == "turn.settled" and e.turn_id == end.turn_id]
        (settle,) = settled
        if invocation in journals:
            assert settle.payload["outcome"] == "checkpointed"
            assert settle.turn_id == journals[invocation].turn_id
            assert settle.payload["rows"] == len(journals[invocation].payload["messages"])
            CHECKPOINTED.append(invocation)
        else:
            assert settle.payload == {"outcome": "rolled_back", "rows": 0}
            ROLLED_BACK.append(invocation)


async def test_kill_9_at_random_points_loses_nothing_committed(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("EMELEX_CRASH_SEED", "1234")))
    roots = max(1, TRIALS // KILLS_PER_ROOT)
    kills = 0
    for number in range(roots):
        root = tmp_path / f"host-{number}"
        workspace = tmp_path / f"work-{number}"
        workspace.mkdir()
        receipts: dict[str, str] = {}
        for run in range(KILLS_PER_ROOT):
            lines = await run_and_kill(root, workspace, run, rng.uniform(0.0, 1.5))
            kills += 1
            for line in lines:
                if line.startswith("RECEIPT "):
                    _, operation, invocation = line.split()
                    # A retried send returns its original receipt across every restart.
                    assert receipts.setdefault(operation, invocation) == invocation
            if (root / "host.db").exists():
                await check_store(root / "host.db", receipts)
        await drain(root, workspace, receipts)
        print(
            f"root {number}: {len(receipts)} receipts, {kills} kills so far,"
            f" {len(CHECKPOINTED)} checkpointed and {len(ROLLED_BACK)} rolled back after a crash"
        )
        assert len(receipts) <= SENDS * KILLS_PER_ROOT
    assert kills >= TRIALS - KILLS_PER_ROOT + 1
