"""The small traps of a first hour with the command line: limits given with ``--agent``
apply, a closed pipe ends a run quietly, a Host URL without a token says where the token
goes, and leaving ``attach`` says how to come back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from emelex.cli import main as cli_main

from .test_cli import EMELEX, run, script
from .test_host_cli import START_SECONDS, _session_id, serve, workspace  # noqa: F401

REPO = Path(__file__).resolve().parents[2]
REVIEWER = str(REPO / "actors" / "repo-reviewer")


def _max_tokens(trace: Path) -> set[int]:
    """The ``gen_ai.request.max_tokens`` of every model round in an OTLP-JSON trace."""
    found = set()
    for resource in json.loads(trace.read_text())["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for attribute in span.get("attributes", []):
                    if attribute["key"] == "gen_ai.request.max_tokens":
                        found.add(int(attribute["value"]["intValue"]))
    return found


def test_max_tokens_and_max_rounds_apply_to_an_agent_package(tmp_path: Path) -> None:
    spec = script(tmp_path, [[{"say": "Reviewed."}]])
    trace = tmp_path / "given.json"
    given = run(
        "run", "--model", spec, "--agent", REVIEWER, "--max-tokens", "7",
        "--trace", str(trace), "Review it.", cwd=tmp_path,
    )  # fmt: skip
    assert given.returncode == 0, given.stderr
    assert _max_tokens(trace) == {7}
    trace = tmp_path / "package.json"
    default = run(
        "run", "--model", spec, "--agent", REVIEWER, "--trace", str(trace), "x", cwd=tmp_path
    )
    assert default.returncode == 0, default.stderr
    assert _max_tokens(trace) == {1024}  # the package's own limit (its agent.toml)
    looping = script(
        tmp_path,
        [[{"call": "list_directory", "arguments": {"path": "."}}]] * 3 + [[{"say": "done"}]],
        "loop.json",
    )
    limited = run(
        "run", "--model", looping, "--agent", REVIEWER, "--max-rounds", "2", "x", cwd=tmp_path
    )
    assert limited.returncode == 1, limited.stderr
    assert "used its 2 model rounds" in limited.stderr


def test_the_plain_run_keeps_its_own_max_tokens(tmp_path: Path) -> None:
    spec = script(tmp_path, [[{"say": "hi"}]])
    trace = tmp_path / "plain.json"
    plain = run("run", "--no-shell", "--model", spec, "--trace", str(trace), "x", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert _max_tokens(trace) == {256}


def test_a_closed_pipe_ends_a_json_run_quietly(tmp_path: Path) -> None:
    # Many deltas, slowly: the reader has gone long before the turn would end.
    steps: list[Any] = [{"say": "line "}, {"wait": 0.05}] * 200
    spec = script(tmp_path, [steps])
    process = subprocess.Popen(
        [*EMELEX, "run", "--json", "--model", spec, "x"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    process.stdout.readline()
    process.stdout.close()  # what `| head -1` does after its line
    started = time.monotonic()
    stderr = process.stderr.read().decode()
    process.stderr.close()
    code = process.wait(timeout=START_SECONDS)
    assert stderr == "" and code == 141, (code, stderr)
    assert time.monotonic() - started < 8  # the turn was cancelled, not run to its end


def test_a_host_url_without_a_token_names_both_ways_to_give_it(
    serve: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    served = serve([[{"say": "hello"}]], tcp=True, child=False)
    refused = run("sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": ""})
    assert refused.returncode == 3
    assert "--token-file" in refused.stderr and "$EMELEX_HOST_TOKEN" in refused.stderr
    wrong = run("sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": "x"})
    assert wrong.returncode == 3 and "refused the token in $EMELEX_HOST_TOKEN" in wrong.stderr


def test_ctrl_c_in_attach_says_how_to_pick_the_session_up(
    serve: Any,  # noqa: F811
    tmp_path: Path,
    workspace: Path,  # noqa: F811
) -> None:
    served = serve([[{"say": "first"}]])
    first = run(
        "run", "--host", str(served.root), "--agent", "helper", "--workspace", str(workspace),
        "hi", cwd=tmp_path,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    session_id = _session_id(first.stderr)
    attach = subprocess.Popen(
        [*EMELEX, "attach", session_id, "--host", str(served.root), "--no-input"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert attach.stderr is not None
    seen = b""
    deadline = time.monotonic() + START_SECONDS
    while b"queue: idle" not in seen:  # it follows the session now
        assert time.monotonic() < deadline and attach.poll() is None, seen
        seen += os.read(attach.stderr.fileno(), 4096)
    attach.send_signal(signal.SIGINT)
    _, rest = attach.communicate(timeout=START_SECONDS)
    assert attach.returncode == 130
    assert f"emelex attach {session_id} --host {served.root}" in (seen + rest).decode()


def test_limits_given_to_a_host_run_are_refused_not_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for flag in ("--max-tokens", "--max-rounds"):
        code = cli_main(["run", "--host", str(tmp_path), "--agent", "a", flag, "5", "hi"])
        assert code == 2 and f"{flag} applies to local runs" in capsys.readouterr().err


def test_a_terminal_prompt_stops_asking_once_another_client_answered(
    serve: Any,  # noqa: F811
    tmp_path: Path,
    workspace: Path,  # noqa: F811
) -> None:
    served = serve(
        [[{"call": "save", "arguments": {"name": "d.txt", "content": "x"}}], [{"say": "Saved."}]]
    )
    runner = subprocess.Popen(
        [*EMELEX, "run", "--host", str(served.root), "--agent", "helper",
         "--workspace", str(workspace), "write d.txt"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert runner.stderr is not None
    seen = b""
    deadline = time.monotonic() + START_SECONDS
    while b"[y/N]" not in seen:
        assert time.monotonic() < deadline and runner.poll() is None, seen
        seen += os.read(runner.stderr.fileno(), 4096)
    # Another client answers; this terminal never types anything.
    answered = run(
        "attach", _session_id(seen.decode()), "--host", str(served.root), "--until-idle",
        cwd=tmp_path, stdin="y\n",
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    try:
        runner.wait(timeout=START_SECONDS / 2)  # its stdin still open: nobody typed
    finally:
        runner.kill()
    out, rest = runner.communicate(timeout=START_SECONDS)
    stderr = (seen + rest).decode()
    assert runner.returncode == 0, stderr
    assert "(approved by another client; not asking here any more)" in stderr
    assert out.decode() == "Saved.\n"
    assert (workspace / "d.txt").read_text() == "x"
