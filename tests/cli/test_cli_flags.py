"""Safe flags of ``emelex run`` through a real subprocess: workspace reads, the round
limit, the token limit note and what a denied model is told."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_cli import EMELEX, _read_until, run, script

SECRET = "PRIVATE-KEY-MATERIAL-4c1d"
OUTSIDE = "OUTSIDE-CONTENT-77e2"
DOTENV = "DOTENV-TOKEN-9a0b"


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello notes\n")
    (ws / ".env").write_text(f"TOKEN={DOTENV}\n")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(SECRET + "\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "data.txt").write_text(OUTSIDE + "\n")
    (ws / "link").symlink_to(outside)
    return {"ws": ws, "home": home, "outside": outside}


def events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines()]


def results(stream: list[dict[str, Any]]) -> list[str]:
    return [e["output"]["content"][0]["text"] for e in stream if e["event"] == "tool_completed"]


def test_workspace_reads_never_approve_secrets_or_outside_paths(
    tmp_path: Path, world: dict[str, Path]
) -> None:
    paths = [
        "notes.txt",
        str(world["home"] / ".ssh" / "id_ed25519"),
        "~/.ssh/id_ed25519",
        "../outside/data.txt",
        str(world["outside"] / "data.txt"),
        ".env",
        "link/data.txt",
    ]
    rounds: list[Any] = [[{"call": "read_file", "arguments": {"path": p}}] for p in paths]
    rounds.append([{"say": "done"}])
    result = run(
        "run",
        "--json",
        "--allow-workspace-reads",
        "--model",
        script(tmp_path, rounds),
        "read them",
        cwd=world["ws"],
        env={"HOME": str(world["home"])},
    )
    assert result.returncode == 0, result.stderr
    stream = events(result.stdout)
    outputs = results(stream)
    assert len(outputs) == len(paths)
    assert "hello notes" in outputs[0]
    everything = result.stdout + result.stderr
    for secret in (SECRET, OUTSIDE, DOTENV):
        assert secret not in everything
    # The key (absolute and as '~/...'), the outside file and .env asked and were denied;
    # '../' and the link are refused by the file tools themselves, without asking.
    decisions = [e["decision"]["type"] for e in stream if e["event"] == "approval_resolved"]
    assert decisions == ["deny"] * 4
    for index in (1, 2, 4, 5):
        assert outputs[index].startswith("denied: the user did not approve this call")
    assert "parent traversal" in outputs[3]
    assert "symbolic link" in outputs[6]
    assert not any("--allow" in output for output in outputs)  # the model gets no flags
    hints = [line for line in result.stderr.splitlines() if line.startswith("emelex: denied")]
    assert len(hints) == 1  # the user gets the hint once
    assert "--allow-workspace-reads does not cover it" in hints[0]


def test_allow_reads_is_a_deprecated_alias(tmp_path: Path, world: dict[str, Path]) -> None:
    rounds = [[{"call": "read_file", "arguments": {"path": ".env"}}], [{"say": "done"}]]
    result = run("run", "--allow-reads", "--model", script(tmp_path, rounds), "x", cwd=world["ws"])
    assert result.returncode == 0, result.stderr
    assert "--allow-reads is deprecated" in result.stderr
    assert DOTENV not in result.stdout + result.stderr
    assert "denied" in result.stderr


def test_a_secret_read_still_asks_on_a_terminal(tmp_path: Path, world: dict[str, Path]) -> None:
    rounds = [
        [{"call": "read_file", "arguments": {"path": ".env"}}],
        [{"call": "read_file", "arguments": {"path": "notes.txt"}}],
        [{"say": "done"}],
    ]
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*EMELEX, "run", "--allow-workspace-reads", "--model", script(tmp_path, rounds), "x"],
        cwd=world["ws"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        prompt = _read_until(master, b"[y/N]", deadline)
        assert b"Approve read_file?" in prompt and b".env" in prompt
        assert b"--allow-workspace-reads does not cover it: .env looks like a secret" in prompt
        os.write(master, b"n\n")
        rest = _read_until(master, b"done", deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    assert b"declined" in rest  # the model was told the user declined
    assert DOTENV.encode() not in prompt + rest
    assert rest.count(b"[y/N]") == 0  # the ordinary read needed no prompt


def test_max_rounds_stops_a_model_that_calls_tools_forever(
    tmp_path: Path, world: dict[str, Path]
) -> None:
    rounds = [[{"call": "list_directory", "arguments": {"path": "."}}] for _ in range(10)]
    result = run(
        "run", "--max-rounds", "3", "--model", script(tmp_path, rounds), "loop", cwd=world["ws"]
    )
    assert result.returncode == 1
    assert result.stderr.count("→ tool list_directory") == 3
    assert "max_rounds" in result.stderr
    bad = run("run", "--max-rounds", "0", "--model", script(tmp_path, rounds), "x", cwd=tmp_path)
    assert bad.returncode == 2
    assert "must be at least 1" in bad.stderr


def test_an_answer_cut_by_the_token_limit_is_said_once(
    tmp_path: Path, world: dict[str, Path]
) -> None:
    cut = [[{"say": "The list has app"}, {"finish": "The list has app", "finish_reason": "length"}]]
    result = run("run", "--model", script(tmp_path, cut), "x", cwd=world["ws"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "The list has app"
    assert result.stderr.count("token limit") == 1
    whole = run("run", "--model", script(tmp_path, [[{"say": "ok"}]], "w.json"), "x", cwd=tmp_path)
    assert "token limit" not in whole.stderr
