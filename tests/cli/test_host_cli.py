"""``emelex run|chat|sessions|attach --host``: real ``emelex serve`` and CLI processes.

The Host does the work; the terminal commands send, watch and answer approvals
through ``respond``, and leaving them never stops the Host's work.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from .test_cli import EMELEX, run, script

REPO = Path(__file__).resolve().parents[2]
WRITER = REPO / "actors" / "writer"
START_SECONDS = 60.0


@attrs.frozen
class Served:
    root: Path
    url: str | None
    process: subprocess.Popen[bytes]

    @property
    def token_file(self) -> Path:
        return self.root / ".emelex" / "token"


def _line(process: subprocess.Popen[bytes], pattern: str, deadline: float) -> re.Match[str]:
    """The first line of ``process``'s stdout matching ``pattern``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = b""
    while True:
        lines = seen.decode(errors="replace").splitlines()
        for line in lines if seen.endswith(b"\n") else lines[:-1]:
            if found := re.search(pattern, line):
                return found
        remaining = deadline - time.monotonic()
        assert remaining > 0 and process.poll() is None, f"no {pattern!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            seen += os.read(fd, 4096)


def _serve(root: Path, rounds: list[Any], *, tcp: bool = False) -> Served:
    root.mkdir(exist_ok=True)
    spec = script(root.parent, rounds, "host-script.json")
    args = ["serve", "--root", str(root), "--agent", f"helper={WRITER}", "--model", spec]
    if tcp:
        args += ["--listen", "127.0.0.1:0"]
    process = subprocess.Popen(
        [*EMELEX, *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root
    )
    deadline = time.monotonic() + START_SECONDS
    _line(process, r"listening on unix:", deadline)
    url = _line(process, r"listening on (http://\S+)", deadline).group(1) if tcp else None
    return Served(root, url, process)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(rounds: list[Any], *, tcp: bool = False) -> Served:
        served = _serve(tmp_path / "root", rounds, tcp=tcp)
        started.append(served)
        return served

    yield start
    for served in started:
        served.process.send_signal(signal.SIGTERM)
        assert served.process.wait(timeout=START_SECONDS) == 0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _write(path: str, content: str) -> dict[str, Any]:
    return {"call": "write_file", "arguments": {"path": path, "content": content}}


def _session_id(stderr: str) -> str:
    found = re.search(r"session (s-[A-Za-z0-9._:-]+)", stderr)
    assert found is not None, stderr
    return found.group(1)


def test_run_on_a_host_answers_its_approval_in_the_terminal(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    served = serve([[_write("a.txt", "from the host")], [{"say": "Wrote a.txt."}]])
    result = run(
        "run", "--host", str(served.root), "--agent", "helper", "--workspace", str(workspace),
        "write a.txt", cwd=tmp_path, stdin="y\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (workspace / "a.txt").read_text() == "from the host"
    assert "Approve write_file?" in result.stderr
    assert "→ write_file" in result.stdout and "Wrote a.txt." in result.stdout
    # The session stays on the Host, listed by `sessions --host`.
    listed = run("sessions", "--host", str(served.root), "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    sessions = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [s["id"] for s in sessions] == [_session_id(result.stderr)]
    assert sessions[0]["agent"] == "helper" and sessions[0]["state"] == "idle"


def test_chat_on_a_host_denies_a_call_and_goes_on(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    served = serve(
        [
            [_write("b.txt", "unwanted")],
            [{"say": "I did not write b.txt."}],
            [{"say": "Second answer."}],
        ]
    )
    result = run(
        "chat", "--host", str(served.root), "--agent", "helper", "--workspace", str(workspace),
        cwd=tmp_path, stdin="write b.txt\nn\nand now?\n/exit\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not (workspace / "b.txt").exists()
    assert "I did not write b.txt." in result.stdout and "Second answer." in result.stdout
    # The model was told the terminal's user declined the call.
    session_id = _session_id(result.stderr)
    shown = run("attach", session_id, "--host", str(served.root), "--until-idle", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "declined this call at the terminal" in shown.stdout
    assert "user> and now?" in shown.stdout


def test_leaving_the_terminal_never_stops_the_work_and_attach_answers(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    served = serve([[{"wait": 1.0}, _write("c.txt", "later")], [{"say": "All done."}]])
    runner = subprocess.Popen(
        [*EMELEX, "run", "--host", str(served.root), "--agent", "helper",
         "--workspace", str(workspace), "write c.txt"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert runner.stderr is not None
    deadline = time.monotonic() + START_SECONDS
    seen = b""
    while b"Approve write_file?" not in seen:
        assert time.monotonic() < deadline, seen
        seen += os.read(runner.stderr.fileno(), 4096)
    session_id = _session_id(seen.decode())
    runner.kill()  # the terminal goes away while the Host waits for an answer
    runner.wait(timeout=START_SECONDS)
    attached = run(
        "attach", session_id, "--host", str(served.root), "--until-idle",
        cwd=tmp_path, stdin="yes\n",
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    assert "Approve write_file?" in attached.stderr
    assert "All done." in attached.stdout
    assert (workspace / "c.txt").read_text() == "later"


def test_a_host_url_needs_its_token(serve: Any, tmp_path: Path) -> None:
    served = serve([], tcp=True)
    refused = run("sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": ""})
    assert refused.returncode == 3 and "token" in refused.stderr.lower()
    wrong = run(
        "sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": "wrong"}
    )
    assert wrong.returncode == 3
    listed = run(
        "sessions", "--host", served.url, "--token-file", str(served.token_file), cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    assert "no sessions on this Host" in listed.stderr


def test_host_usage_errors(tmp_path: Path) -> None:
    no_agent = run("run", "--host", str(tmp_path), "hello", cwd=tmp_path)
    assert no_agent.returncode == 2 and "--agent NAME" in no_agent.stderr
    local_flag = run(
        "run", "--host", str(tmp_path), "--agent", "helper", "--model", "x", "hi", cwd=tmp_path
    )
    assert local_flag.returncode == 2 and "--model applies to local runs" in local_flag.stderr
    missing = run("sessions", "--host", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert missing.returncode == 3 and "no such directory" in missing.stderr
    not_serving = run("sessions", "--host", str(tmp_path), cwd=tmp_path)
    assert not_serving.returncode == 3 and not_serving.stderr.startswith("emelex:")
    chat_agent = run("chat", "--agent", "helper", cwd=tmp_path)
    assert chat_agent.returncode == 2 and "--agent NAME needs --host" in chat_agent.stderr
