"""Issue 18 item 2 through the command line: ``emelex chat`` with a 4,100-call round,
and ``emelex chat --resume`` of a session stored past the ceilings (older versions
committed such rounds, and the resume was then refused)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import trio

from emelex._ids import new_id
from emelex.model import Message, ToolCall
from emelex.store import open_sqlite_store

EMELEX = [sys.executable, "-m", "emelex.cli"]


def scripted(tmp_path: Path, name: str, rounds: list[Any]) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"rounds": rounds}))
    return f"scripted:{path}"


def chat(cwd: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EMELEX, "chat", "--no-shell", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )


def stored_messages(store: str, session_id: str) -> tuple[Message, ...]:
    async def load() -> tuple[Message, ...]:
        async with open_sqlite_store(store) as opened:
            return tuple((await opened.load_session(session_id)).messages)

    return trio.run(load)


def session_ids(cwd: Path, store: str) -> list[str]:
    listing = subprocess.run(
        [*EMELEX, "sessions", "list", "--json", "--store", store],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return [json.loads(line)["id"] for line in listing.stdout.splitlines()]


def test_a_4100_call_round_in_chat_is_refused_and_the_session_resumes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    store = str(tmp_path / "sessions.db")
    calls = [{"call": "read_file", "arguments": {"path": "notes.txt"}} for _ in range(4_100)]
    spec = scripted(tmp_path, "a.json", [calls, [{"say": "fewer then"}], [{"say": "next turn"}]])
    first = chat(workspace, "--model", spec, "--store", store, stdin="read\nagain\n/exit\n")
    assert first.returncode == 0, first.stderr
    assert "fewer then" in first.stdout and "next turn" in first.stdout
    (session_id,) = session_ids(workspace, store)
    history = stored_messages(store, session_id)
    assert len(history) <= 4_096
    spec = scripted(tmp_path, "b.json", [[{"say": "resumed fine"}]])
    resumed = chat(
        workspace, "--resume", session_id, "--model", spec, "--store", store, stdin="hi\n"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed fine" in resumed.stdout


def test_a_session_stored_past_the_ceilings_resumes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = str(tmp_path / "sessions.db")
    spec = scripted(tmp_path, "a.json", [[{"say": "stored"}]])
    created = chat(workspace, "--model", spec, "--store", store, stdin="start\n/exit\n")
    assert created.returncode == 0, created.stderr
    (session_id,) = session_ids(workspace, store)
    # What an older emelex committed: a 4,100-call round and an approved 5 MiB write.
    calls = tuple(ToolCall(new_id(), "read_file", {"path": "notes.txt"}) for _ in range(4_100))
    big = ToolCall(new_id(), "write_file", {"path": "big.txt", "content": "x" * (5 << 20)})
    old_turns = [
        Message("user", "read it all"),
        Message("assistant", "", tool_calls=calls),
        *(Message("tool", "hello", tool_call_id=call.id) for call in calls),
        Message("user", "write big"),
        Message("assistant", "", tool_calls=(big,)),
        Message("tool", "wrote big.txt", tool_call_id=big.id),
        Message("assistant", "done"),
    ]

    async def append() -> None:
        async with open_sqlite_store(store) as opened:
            await opened.append_turn(session_id, new_id(), old_turns)

    trio.run(append)
    spec = scripted(tmp_path, "b.json", [[{"say": "resumed fine"}], [{"say": "and again"}]])
    resumed = chat(
        workspace,
        "--resume",
        session_id,
        "--model",
        spec,
        "--store",
        store,
        stdin="hi\nmore\n/exit\n",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed fine" in resumed.stdout and "and again" in resumed.stdout
    assert len(stored_messages(store, session_id)) == 2 + len(old_turns) + 4
