"""``emelex run|chat|sessions|attach --host``: a served Host and the CLI, each in a real
process of its own.

The Host does the work; the terminal commands send, watch and answer approvals
through ``respond``, and leaving them never stops the Host's work. Approval flows use
``host_child.py`` (``serve`` with a scripted agent whose ``save`` tool needs approval:
agent packages served by ``emelex serve`` get no tools yet); the rest runs against
``emelex serve`` itself.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from emelex.cli import main as cli_main

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


def _output_until(process: subprocess.Popen[bytes], pattern: str, deadline: float) -> str:
    """``process``'s stdout up to the first complete line matching ``pattern``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    seen = b""
    while not re.search(pattern, seen.decode(errors="replace").rpartition("\n")[0]):
        remaining = deadline - time.monotonic()
        assert remaining > 0 and process.poll() is None, f"no {pattern!r} in {seen!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            seen += os.read(fd, 4096)
    return seen.decode(errors="replace")


def _serve(root: Path, out: Path, rounds: list[Any], *, tcp: bool, child: bool) -> Served:
    root.mkdir(exist_ok=True)
    spec = script(root.parent, rounds, "host-script.json")
    if child:
        command = [sys.executable, "-m", "tests.cli.host_child", str(root), spec[9:], str(out)]
        command += ["--tcp"] if tcp else []
    else:
        command = [*EMELEX, "serve", "--root", str(root), "--agent", f"helper={WRITER}"]
        command += ["--model", spec] + (["--listen", "127.0.0.1:0"] if tcp else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO)
    deadline = time.monotonic() + START_SECONDS
    announced = _output_until(
        process, r"listening on http://" if tcp else "listening on unix:", deadline
    )
    found = re.search(r"listening on (http://\S+)", announced)
    url = found.group(1) if found else None
    return Served(root, url, process)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Any]:
    started: list[Served] = []

    def start(rounds: list[Any], *, tcp: bool = False, child: bool = True) -> Served:
        served = _serve(tmp_path / "root", tmp_path / "ws", rounds, tcp=tcp, child=child)
        started.append(served)
        return served

    yield start
    for served in started:
        served.process.send_signal(signal.SIGTERM)
        code = served.process.wait(timeout=START_SECONDS)
        assert served.process.stdout is not None
        served.process.stdout.close()
        assert code == 0


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def _write(path: str, content: str) -> dict[str, Any]:
    return {"call": "save", "arguments": {"name": path, "content": content}}


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
    assert "Approve save?" in result.stderr
    assert '→ save {"content": "from the host", "name": "a.txt"}' in result.stderr
    assert "← save: saved a.txt" in result.stderr
    assert result.stdout == "Wrote a.txt.\n"
    unknown = run("attach", "s-unknown", "--host", str(served.root), cwd=tmp_path)
    assert unknown.returncode == 3 and "s-unknown" in unknown.stderr
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
            [{"say": "Resumed."}],
        ]
    )
    result = run(
        "chat", "--host", str(served.root), "--agent", "helper", "--workspace", str(workspace),
        cwd=tmp_path, stdin="write b.txt\nn\nand now?\n/exit\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert not (workspace / "b.txt").exists()
    assert "I did not write b.txt." in result.stdout and "Second answer." in result.stdout
    session_id = _session_id(result.stderr)
    resumed = run(
        "chat", "--host", str(served.root), "--resume", session_id,
        cwd=tmp_path, stdin="once more\n",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout == "Resumed.\n"  # earlier turns are not shown again
    # The model was told the terminal's user declined the call.
    shown = run("attach", session_id, "--host", str(served.root), "--until-idle", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "declined this call at the terminal" in shown.stderr
    assert "user> and now?" in shown.stdout and "user> once more" in shown.stdout


def _asked_then_left(served: Served, workspace: Path, cwd: Path, prompt: str) -> str:
    """``emelex run --host`` until the Host asks its approval, then the terminal goes
    away (killed) while the Host waits: the session's id."""
    runner = subprocess.Popen(
        [*EMELEX, "run", "--host", str(served.root), "--agent", "helper",
         "--workspace", str(workspace), prompt],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
    )  # fmt: skip
    assert runner.stderr is not None
    deadline = time.monotonic() + START_SECONDS
    seen = b""
    while b"Approve save?" not in seen:
        assert time.monotonic() < deadline and runner.poll() is None, seen
        seen += os.read(runner.stderr.fileno(), 4096)
    runner.kill()
    runner.communicate(timeout=START_SECONDS)
    return _session_id(seen.decode())


def test_leaving_the_terminal_never_stops_the_work_and_attach_answers(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    served = serve([[{"wait": 1.0}, _write("c.txt", "later")], [{"say": "All done."}]])
    session_id = _asked_then_left(served, workspace, tmp_path, "write c.txt")
    attached = run(
        "attach", session_id, "--host", str(served.root), "--until-idle",
        cwd=tmp_path, stdin="yes\n",
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    assert "Approve save?" in attached.stderr
    # The queue as it changes: the waiting turn, then nothing.
    assert re.search(r"queue: running \S+, 0 queued\n(.|\n)*queue: idle", attached.stderr)
    assert "All done." in attached.stdout
    assert (workspace / "c.txt").read_text() == "later"


def test_attach_answers_an_approval_asked_before_the_host_restarted(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    """The served Host stops (SIGTERM) while a turn waits for an approval: the one it
    is restarted as shows the same question to ``attach``, and the answer continues the
    turn without asking the model that round again."""
    first = serve([[_write("d.txt", "kept")], [{"say": "never asked"}]])
    session_id = _asked_then_left(first, workspace, tmp_path, "write d.txt")
    first.process.send_signal(signal.SIGTERM)
    assert first.process.wait(timeout=START_SECONDS) == 0
    # The restarted Host's model knows only the round after the approval.
    second = serve([[{"say": "Saved after the restart."}]])
    attached = run(
        "attach", session_id, "--host", str(second.root), "--until-idle",
        cwd=tmp_path, stdin="yes\n",
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    assert "Approve save?" in attached.stderr
    assert "Saved after the restart." in attached.stdout
    assert "never asked" not in attached.stdout
    assert (workspace / "d.txt").read_text() == "kept"


def test_emelex_serve_over_tcp_needs_its_token(serve: Any, tmp_path: Path, workspace: Path) -> None:
    served = serve([[{"say": "Served by emelex serve."}]], tcp=True, child=False)
    refused = run("sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": ""})
    assert refused.returncode == 3 and "token" in refused.stderr.lower()
    wrong = run("sessions", "--host", served.url, cwd=tmp_path, env={"EMELEX_HOST_TOKEN": "wrong"})
    assert wrong.returncode == 3
    token = ["--token-file", str(served.token_file)]
    answered = run(
        "run", "--host", served.url, *token, "--agent", "helper",
        "--workspace", str(workspace), "hello", cwd=tmp_path,
    )  # fmt: skip
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout.strip() == "Served by emelex serve."
    by_env = run(
        "sessions", "--host", served.url, cwd=tmp_path,
        env={"EMELEX_HOST_TOKEN": served.token_file.read_text().strip()},
    )  # fmt: skip
    assert by_env.returncode == 0 and _session_id(answered.stderr) in by_env.stdout


def test_host_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)

    def main(*args: str) -> tuple[int, str]:
        code = cli_main(list(args))
        return code, capsys.readouterr().err

    code, err = main("run", "--host", str(tmp_path), "hello")
    assert code == 2 and "--agent NAME" in err
    code, err = main("run", "--host", str(tmp_path), "--agent", "helper", "--model", "x", "hi")
    assert code == 2 and "--model applies to local runs" in err
    code, err = main("sessions", "--host", str(tmp_path / "nowhere"))
    assert code == 3 and "no such directory" in err
    code, err = main("sessions", "--host", str(tmp_path))
    assert code == 3 and f"no Host serves {str(tmp_path)!r}" in err
    assert f"emelex serve --root {tmp_path}" in err
    code, err = main("sessions", "--host", str(tmp_path), "--token-file", "t")
    assert code == 3 and "--token-file is for a Host URL" in err
    code, err = main("chat", "--agent", "helper")
    assert code == 2 and "--agent NAME needs --host" in err
    code, err = main("sessions", "show", "s-1", "--host", "http://127.0.0.1:9")
    assert code == 2 and "only 'list'" in err


def _stop_running(root: Path, session_id: str) -> str:
    """Stop the session's running invocation through a HostClient; its id."""
    import trio

    from emelex.service import HostClient

    async def go() -> str:
        async with HostClient.connect(root=root) as client:
            with trio.fail_after(START_SECONDS):
                while True:
                    queue = await client.queue(session_id)
                    running = [e for e in queue.entries if e.state == "running"]
                    if running:
                        break
                    await trio.sleep(0.05)
            invocation_id = running[0].invocation_id
            await client.stop(session_id, invocation_id, operation="stop-from-test")
            return invocation_id

    return trio.run(go)


def test_a_stop_that_committed_nothing_is_shown_by_run_and_attach(
    serve: Any, tmp_path: Path, workspace: Path
) -> None:
    served = serve([[{"say": "Working"}, {"wait": 3600}], [{"say": "Next answer."}]])
    runner = subprocess.Popen(
        [*EMELEX, "run", "--host", str(served.root), "--agent", "helper",
         "--workspace", str(workspace), "a long task"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
    )  # fmt: skip
    assert runner.stderr is not None
    deadline = time.monotonic() + START_SECONDS
    seen = b""
    while not re.search(rb"session s-\S+\n", seen):
        assert time.monotonic() < deadline, seen
        seen += os.read(runner.stderr.fileno(), 4096)
    session_id = _session_id(seen.decode())
    _stop_running(served.root, session_id)
    out, err = runner.communicate(timeout=START_SECONDS)
    # The terminal that sent it says what became of it.
    assert "⊘ stopped before anything was committed" in (seen + err).decode()
    assert "by stop stop-from-test" in (seen + err).decode()
    assert runner.returncode == 0 and out == b""
    later = run(
        "chat", "--host", str(served.root), "--resume", session_id, cwd=tmp_path, stdin="next\n"
    )  # fmt: skip
    assert later.returncode == 0, later.stderr
    assert later.stdout == "Next answer.\n"  # the stopped turn is not shown again
    assert "⊘" not in later.stderr
    attached = run(
        "attach", session_id, "--host", str(served.root), "--until-idle", cwd=tmp_path
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    # The stopped turn's prompt is in no history row; attach shows it with what happened.
    assert attached.stdout == "user> a long task\nuser> next\nNext answer.\n"
    note = re.search(
        r"⊘ stopped before anything was committed · (.+) · by stop (\S+)\n", attached.stderr
    )
    assert note is not None, attached.stderr
    assert note.group(2) == "stop-from-test"
