"""``emelex chat --resume`` continues a stored chat whose calls got synthetic results
(unknown name, invalid arguments, denied, not executed, interrupted), as the Host does."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentCancellation, AgentSession, ToolCancellationPolicy, TurnCancelled
from emelex.agent._retired import RETIRED_DESCRIPTION
from emelex.agent._turn_rules import INTERRUPTED, NOT_EXECUTED
from emelex.app import Engine
from emelex.cli._plain import plain_agent, start_plain_session
from emelex.model import Client, GenerationRequest, Message, ToolDefinition
from emelex.testing import ApproveAll, Call, Say, ScriptedModel
from emelex.tools import ToolInvocation, ToolOutput
from tests.cli.test_cli import EMELEX, run, script


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("hello notes\n")
    return ws


def stored(store: str, workspace: Path) -> dict[str, Any]:
    listing = run("sessions", "list", "--json", "--store", store, cwd=workspace)
    (session,) = [json.loads(line) for line in listing.stdout.splitlines()]
    exported = run("sessions", "export", session["id"], "--store", store, cwd=workspace)
    result: dict[str, Any] = json.loads(exported.stdout)
    return result


def results(export: dict[str, Any]) -> list[str]:
    return [
        m["data"]["content"][0]["text"] for m in export["messages"] if m["data"]["role"] == "tool"
    ]


def resume(tmp_path: Path, store: str, workspace: Path, session_id: str, *flags: str) -> Any:
    spec = script(tmp_path, [[{"say": "after resume"}]], "resume.json")
    return run(
        *("chat", "--resume", session_id, "--model", spec, "--store", store, *flags),
        cwd=workspace,
        stdin="once more\n",
    )


def test_chat_resumes_unknown_invalid_and_denied_calls(tmp_path: Path, workspace: Path) -> None:
    store = str(tmp_path / "s.db")
    rounds = [
        [{"call": "no_such_tool", "arguments": {}}],
        [{"say": "no such tool"}],
        [{"call": "read_file", "arguments": {"wrong": 1}}],
        [{"say": "bad arguments"}],
        [{"call": "write_file", "arguments": {"path": "x.txt", "content": "y"}}],
        [{"say": "denied"}],
    ]
    first = run(
        *("chat", "--model", script(tmp_path, rounds), "--store", store),
        cwd=workspace,
        stdin="one\ntwo\nthree\n",
    )
    assert first.returncode == 0, first.stderr
    export = stored(store, workspace)
    unknown, invalid, denied = results(export)
    assert unknown.startswith("unknown tool 'no_such_tool'")
    assert "path" in invalid and denied.startswith("denied")
    resumed = resume(tmp_path, store, workspace, export["id"])
    assert resumed.returncode == 0, resumed.stderr
    assert "after resume" in resumed.stdout
    assert stored(store, workspace)["turns"] == 4


def test_chat_resumes_a_turn_cancelled_mid_batch(tmp_path: Path, workspace: Path) -> None:
    store = str(tmp_path / "s.db")
    command = "touch started && sleep 60"
    rounds = [
        [
            {"call": "shell", "arguments": {"command": command}},
            {"call": "read_file", "arguments": {"path": "notes.txt"}},
        ]
    ]
    spec = script(tmp_path, rounds)
    with subprocess.Popen(
        [*EMELEX, "chat", "--model", spec, "--store", store, "--allow-tool", "shell"],
        cwd=workspace,
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stderr is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while not (workspace / "started").exists():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)  # Ctrl-C: the turn is cancelled, chat goes on
        _, errors = process.communicate("/exit\n", timeout=60)
        assert process.returncode == 0, errors
    export = stored(store, workspace)
    assert results(export)[-1] == NOT_EXECUTED  # read_file never ran
    resumed = resume(tmp_path, store, workspace, export["id"])
    assert resumed.returncode == 0, resumed.stderr
    assert "after resume" in resumed.stdout


def test_a_tool_removed_since_is_refused_as_drift_not_as_history(
    tmp_path: Path, workspace: Path
) -> None:
    store = str(tmp_path / "s.db")
    rounds = [[{"call": "shell", "arguments": {"command": "true"}}], [{"say": "denied"}]]
    first = run(
        *("chat", "--model", script(tmp_path, rounds), "--store", store),
        cwd=workspace,
        stdin="go\n",
    )
    assert first.returncode == 0, first.stderr
    session_id = stored(store, workspace)["id"]
    resumed = resume(tmp_path, store, workspace, session_id, "--no-shell")
    # The history is valid replay; the chat refuses because its stored authority changed.
    assert resumed.returncode == 3
    assert "authority drifted" in resumed.stderr
    assert "undeclared" not in resumed.stderr


class Blocking:
    """An interruptible tool that never returns on its own."""

    def __init__(self) -> None:
        self.started = trio.Event()

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("slow", "Wait for a long time.", {"type": "object"})

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    def approval_reason(self, arguments: object) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.started.set()
        await trio.sleep_forever()


async def interrupted_history(root: Path) -> tuple[Message, ...]:
    """What a turn cancelled while ``slow`` ran commits (a real checkpoint)."""
    slow = Blocking()
    model = ScriptedModel([[Call("slow", {})]])
    builder = AgentSession.builder(model, root).include_shell_tool(False).tool(slow)
    cancellation = AgentCancellation()
    with builder.build() as session:
        async with trio.open_nursery() as nursery:

            async def cancel_once_started() -> None:
                await slow.started.wait()
                cancellation.cancel()

            nursery.start_soon(cancel_once_started)
            with pytest.raises(TurnCancelled):
                await session.run("go", cancellation=cancellation)
        return session.history


async def test_the_plain_session_resumes_an_interrupted_call_of_a_tool_it_lacks(
    workspace: Path,
) -> None:
    history = await interrupted_history(workspace)
    assert history[-1].text == INTERRUPTED
    model = ScriptedModel([[Say("after resume")]])
    agent, harness = plain_agent(
        Client(model), str(workspace), ApproveAll(), max_tokens=None, shell=True, file_tools=True
    )
    async with Engine() as engine:
        session = await start_plain_session(
            engine, agent, harness, max_rounds=3, history=history, committed=True
        )
        async with session:
            turn = await session.agent_session.run("once more")
    assert turn.response.text == "after resume"
    (request,) = model.requests
    assert isinstance(request, GenerationRequest)
    declared = {tool.name: tool.description for tool in request.tools}
    assert declared["slow"] == RETIRED_DESCRIPTION
    assert "slow" not in session.agent_session.available_tools
