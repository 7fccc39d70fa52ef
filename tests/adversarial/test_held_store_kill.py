"""Issue 18, an attack that held: ``kill -9`` of the process while it commits turns.

A child process appends two-message turns to a SQLite session store as fast as it can,
acknowledging each commit on stdout; the test kills it with ``SIGKILL`` at a random
moment. On reopen the session holds every acknowledged turn (and perhaps the one in
flight), each whole: never half a turn, never a store that refuses to open.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from emelex.store import open_sqlite_store

TRIALS = 4

CHILD = r"""
import sys, trio
from emelex.model import Message
from emelex.store import open_sqlite_store

async def main(path):
    async with open_sqlite_store(path) as store:
        n = 0
        while True:
            n += 1
            turn = [Message("user", f"q{n} " + "x" * 2000), Message("assistant", f"a{n}")]
            await store.append_turn("s", f"{sys.argv[2]}-{n}", turn)
            sys.stdout.write(f"{n}\n")
            sys.stdout.flush()

trio.run(main, sys.argv[1])
"""


def kill_while_committing(path: str, trial: int, rng: random.Random) -> int:
    """Run the child until it acknowledged a few commits, then SIGKILL it; return the
    highest acknowledged turn."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, path, f"trial{trial}"], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    try:
        first = child.stdout.readline()  # the child is committing
        assert first.strip() == "1", first
        time.sleep(rng.uniform(0.0, 0.15))
    finally:
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read()
        child.stdout.close()
        child.wait(timeout=10)
    acknowledged = [first, *rest.splitlines()]
    return int(acknowledged[-1].strip() or acknowledged[-2])


async def test_sigkill_during_commits_keeps_whole_turns(tmp_path: Path) -> None:
    rng = random.Random(18)
    path = str(tmp_path / "s.db")
    async with open_sqlite_store(path) as store:
        await store.create_session("s", "{}")
    before = 0
    with trio.fail_after(60):
        for trial in range(TRIALS):
            acknowledged = await trio.to_thread.run_sync(kill_while_committing, path, trial, rng)
            async with open_sqlite_store(path) as store:
                stored = await store.load_session("s")
                assert stored.turns in (before + acknowledged, before + acknowledged + 1)
                assert len(stored.messages) == 2 * stored.turns
                for index in range(0, len(stored.messages), 2):
                    user, assistant = stored.messages[index : index + 2]
                    assert user.role == "user" and assistant.role == "assistant"
                    assert user.text[1:].split(" ")[0] == assistant.text[1:]
                    assert user.text.endswith("x" * 2000)
                before = stored.turns
    assert before >= TRIALS
