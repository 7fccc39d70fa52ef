"""The emelex command, run as a real subprocess (pty for prompts, real SIGINT)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

EMELEX = [sys.executable, "-m", "emelex.cli"]


def script(tmp_path: Path, rounds: list[Any], name: str = "s.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps({"rounds": rounds}))
    return f"scripted:{path}"


def run(
    *args: str, cwd: Path, stdin: str = "", env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*EMELEX, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello notes\n")
    return ws


def test_run_streams_the_answer_and_summarizes_tools(tmp_path: Path, workspace: Path) -> None:
    spec = script(
        tmp_path,
        [
            [{"think": "Reading."}, {"call": "read_file", "arguments": {"path": "notes.txt"}}],
            [{"say": "They say "}, {"say": "hello."}],
        ],
    )
    result = run("run", "--model", spec, "What do my notes say?", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "They say hello."
    assert "→ tool read_file" in result.stderr
    assert "Reading." in result.stderr
    assert "← result" in result.stderr


def test_run_json_prints_one_event_per_line(tmp_path: Path, workspace: Path) -> None:
    spec = script(tmp_path, [[{"say": "ok"}]])
    result = run("run", "--json", "--model", spec, "x", cwd=workspace)
    assert result.returncode == 0
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert [e["event"] for e in events] == [
        "turn_started",
        "model_started",
        "answer_delta",
        "model_completed",
        "turn_completed",
    ]
    assert events[2]["text"] == "ok"
    assert events[-1]["usage"]["output_tokens"] == 1


def test_without_tty_approvals_are_denied_unless_allowed(tmp_path: Path, workspace: Path) -> None:
    rounds = [
        [{"call": "write_file", "arguments": {"path": "out.txt", "content": "hi"}}],
        [{"say": "done"}],
    ]
    denied = run("run", "--model", script(tmp_path, rounds), "write", cwd=workspace)
    assert denied.returncode == 0
    assert "denied" in denied.stderr
    assert not (workspace / "out.txt").exists()
    allowed = run(
        "run",
        "--model",
        script(tmp_path, rounds, "b.json"),
        "--allow-tool",
        "write_file",
        "write",
        cwd=workspace,
    )
    assert allowed.returncode == 0, allowed.stderr
    assert (workspace / "out.txt").read_text() == "hi"


def _read_until(fd: int, needle: bytes, deadline: float) -> bytes:
    seen = b""
    while needle not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out waiting for {needle!r}; saw {seen[-500:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


def test_interactive_approval_on_a_pseudo_terminal(tmp_path: Path, workspace: Path) -> None:
    rounds = [
        [{"call": "write_file", "arguments": {"path": "pty.txt", "content": "yes"}}],
        [{"call": "write_file", "arguments": {"path": "pty.txt", "content": "again"}}],
        [{"say": "done"}],
    ]
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*EMELEX, "run", "--model", script(tmp_path, rounds), "write it"],
        cwd=workspace,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    try:
        deadline = time.monotonic() + 60
        prompt = _read_until(master, b"[y/N]", deadline)
        assert b"Approve write_file?" in prompt
        assert str(workspace / "pty.txt").encode() in prompt  # the exact canonical action
        os.write(master, b"y\n")
        # Nothing is remembered: the identical follow-up call asks again; default is No.
        _read_until(master, b"[y/N]", deadline)
        os.write(master, b"\n")
        _read_until(master, b"done", deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    assert (workspace / "pty.txt").read_text() == "yes"


def test_ctrl_c_cancels_the_turn_and_exits_130(tmp_path: Path, workspace: Path) -> None:
    spec = script(tmp_path, [[{"say": "thinking"}, {"wait": 600}, {"say": "never"}]])
    with subprocess.Popen(
        [*EMELEX, "run", "--model", spec, "x"],
        cwd=workspace,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as process:
        assert process.stdout is not None
        _read_until(process.stdout.fileno(), b"thinking", time.monotonic() + 60)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130


def test_chat_stores_turns_and_resumes(tmp_path: Path, workspace: Path) -> None:
    store = str(tmp_path / "sessions.db")
    spec = script(
        tmp_path, [[{"say": "first answer"}], [{"say": "second answer"}], [{"say": "after resume"}]]
    )
    result = run(
        "chat", "--model", spec, "--store", store, cwd=workspace, stdin="hello\nmore\n/exit\n"
    )
    assert result.returncode == 0, result.stderr
    assert "first answer" in result.stdout and "second answer" in result.stdout
    listing = run("sessions", "list", "--json", "--store", store, cwd=workspace)
    (session,) = [json.loads(line) for line in listing.stdout.splitlines()]
    assert (session["turns"], session["messages"], session["title"]) == (2, 4, "hello")
    shown = run("sessions", "show", session["id"], "--store", store, cwd=workspace)
    assert "second answer" in shown.stdout
    exported = json.loads(
        run("sessions", "export", session["id"], "--store", store, cwd=workspace).stdout
    )
    assert len(exported["messages"]) == 4
    assert exported["authority"]["workspace"]["path"] == str(workspace.resolve())
    # Resuming uses the stored model spec; the stored script has one round left? No:
    # a scripted model restarts, so give a fresh one for the resumed chat.
    spec2 = script(tmp_path, [[{"say": "after resume"}]], "resume.json")
    resumed = run(
        "chat",
        "--resume",
        session["id"],
        "--model",
        spec2,
        "--store",
        store,
        cwd=workspace,
        stdin="again\n",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "after resume" in resumed.stdout
    assert (
        json.loads(run("sessions", "list", "--json", "--store", store, cwd=workspace).stdout)[
            "turns"
        ]
        == 3
    )
    # Drift: the same session resumed over another workspace is refused.
    other = tmp_path / "other"
    other.mkdir()
    drifted = run(
        "chat",
        "--resume",
        session["id"],
        "--model",
        spec2,
        "--store",
        store,
        "--workspace",
        str(other),
        cwd=workspace,
        stdin="x\n",
    )
    assert drifted.returncode == 3
    assert "authority drifted" in drifted.stderr and "workspace" in drifted.stderr
    deleted = run("sessions", "delete", session["id"], "--store", store, cwd=workspace)
    assert deleted.returncode == 0
    missing = run("sessions", "show", session["id"], "--store", store, cwd=workspace)
    assert missing.returncode == 3


def test_supervise_a_program(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text(
        "import trio\n"
        "from emelex.runtime import open_supervisor\n"
        "async def main():\n"
        "    async with open_supervisor('app') as sup:\n"
        "        async with sup.open_actor('session', 'demo'):\n"
        "            await trio.sleep(60)\n"
        "trio.run(main)\n"
    )
    result = run("supervise", "--once", "--json", "--", sys.executable, str(program), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    snapshot = json.loads(result.stdout)
    assert snapshot["supervisor"] == "app"
    kinds = [(r["kind"], r["name"]) for r in snapshot["roots"]]
    assert ("session", "demo") in kinds
    assert ("service", "diagnostics") in kinds


def test_run_supervise_shows_its_own_tree(tmp_path: Path, workspace: Path) -> None:
    spec = script(
        tmp_path, [[{"call": "list_directory", "arguments": {"path": "."}}], [{"say": "ok"}]]
    )
    result = run("run", "--supervise", "--model", spec, "x", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert "─ session" in result.stderr
    assert "─ turn" in result.stderr


def test_bad_model_spec_is_a_configuration_error(tmp_path: Path) -> None:
    result = run("run", "--model", "nonsense:thing", "x", cwd=tmp_path)
    assert result.returncode == 3
    assert "unknown model spec" in result.stderr


def test_run_an_agent_package(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    spec = script(
        tmp_path,
        [[{"call": "list_directory", "arguments": {"path": "."}}], [{"say": "Reviewed."}]],
    )
    result = run(
        "run",
        "--model",
        spec,
        "--agent",
        str(root / "actors" / "repo-reviewer"),
        "Review it.",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Reviewed."
    assert "→ tool list_directory" in result.stderr
    assert "← result" in result.stderr
    missing = run("run", "--model", spec, "--agent", str(tmp_path / "nope"), "x", cwd=tmp_path)
    assert missing.returncode == 3


def test_run_an_agent_package_on_a_real_workspace(tmp_path: Path, workspace: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    spec = script(
        tmp_path,
        [
            [{"call": "list_directory", "arguments": {"path": "."}}],
            [{"call": "read_file", "arguments": {"path": "notes.txt"}}],
            [{"say": "Reviewed."}],
        ],
    )
    result = run(
        "run",
        "--model",
        spec,
        "--workspace",
        str(workspace),
        "--allow-reads",
        "--agent",
        str(root / "actors" / "repo-reviewer"),
        "Review it.",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Reviewed."
    # The tools see the real directory (as /workspace), not the package's private
    # seeded workspace.
    assert '["/workspace": 1 entry] notes.txt' in result.stderr
    assert '"/workspace/notes.txt": lines 1-1; 12-byte file' in result.stderr
    assert "seeded files are not copied there (review-checklist.md)" in result.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]


def test_a_package_on_a_real_workspace_keeps_its_policy(tmp_path: Path, workspace: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    rounds = [
        [{"call": "write_file", "arguments": {"path": "draft.md", "content": "# Draft\n"}}],
        [{"say": "Written."}],
    ]
    # writer is read-write: with the write approved, the file lands in the real directory
    # (given relative to the working directory).
    written = run(
        "run",
        "--model",
        script(tmp_path, rounds),
        "--workspace",
        "ws",
        "--allow-tool",
        "write_file",
        "--agent",
        str(root / "actors" / "writer"),
        "Write a draft.",
        cwd=tmp_path,
    )
    assert written.returncode == 0, written.stderr
    assert (workspace / "draft.md").read_text() == "# Draft\n"
    assert not (workspace / "style-guide.md").exists()
    # repo-reviewer is read-only: it has no write tool, whatever the flags say.
    (workspace / "draft.md").unlink()
    refused = run(
        "run",
        "--model",
        script(tmp_path, rounds, "b.json"),
        "--workspace",
        str(workspace),
        "--allow-tool",
        "write_file",
        "--agent",
        str(root / "actors" / "repo-reviewer"),
        "Write a draft.",
        cwd=tmp_path,
    )
    assert refused.returncode == 0, refused.stderr
    assert "unknown tool 'write_file'" in refused.stderr
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]
    # ... and its hidden patterns hold in the real directory.
    (workspace / ".env").write_text("SECRET=1\n")
    hidden = run(
        "run",
        "--model",
        script(tmp_path, [[{"call": "read_file", "arguments": {"path": ".env"}}], [{"say": "ok"}]]),
        "--workspace",
        str(workspace),
        "--allow-reads",
        "--agent",
        str(root / "actors" / "repo-reviewer"),
        "Read .env.",
        cwd=tmp_path,
    )
    assert hidden.returncode == 0, hidden.stderr
    assert ".env is hidden by the workspace policy" in hidden.stderr
    assert "SECRET" not in hidden.stderr + hidden.stdout


def test_a_package_workspace_must_be_a_directory(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    spec = script(tmp_path, [[{"say": "never"}]])
    package = str(root / "actors" / "repo-reviewer")
    missing = run(
        "run", "--model", spec, "--workspace", "nope", "--agent", package, "x", cwd=tmp_path
    )
    assert missing.returncode == 3
    assert "cannot run the agent package: workspace 'nope'" in missing.stderr
    a_file = run(
        "run", "--model", spec, "--workspace", spec[9:], "--agent", package, "x", cwd=tmp_path
    )
    assert a_file.returncode == 3
    assert "is not a directory" in a_file.stderr
    assert missing.stdout == a_file.stdout == ""


def test_ctrl_c_cancels_a_package_turn_and_exits_130(tmp_path: Path, workspace: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    spec = script(tmp_path, [[{"say": "thinking"}, {"wait": 600}, {"say": "never"}]])
    package = str(root / "actors" / "repo-reviewer")
    with subprocess.Popen(
        [*EMELEX, "run", "--model", spec, "--workspace", str(workspace), "--agent", package, "x"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    ) as process:
        assert process.stdout is not None
        _read_until(process.stdout.fileno(), b"thinking", time.monotonic() + 60)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    assert sorted(p.name for p in workspace.iterdir()) == ["notes.txt"]
