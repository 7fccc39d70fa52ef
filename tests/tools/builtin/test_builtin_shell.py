"""The shell tool through session turns: approval, environment, bounds, cancellation.

Cancellation is synchronised through a FIFO in the workspace: the command's processes
write to it once they exist, the test reads those lines, cancels, and then scans
``/proc/*/environ`` for the marker the processes carry. No sleeps-and-hope.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import AgentCancellation, AgentEvent, AgentSession, DenyAll, TurnCancelled
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel
from emelex.tools._process import build_shell_environment, environment_digest

Runner = Callable[..., Awaitable[Any]]


def _real(path: Path) -> str:
    return os.path.realpath(path)


def _survivors(marker: str) -> list[int]:
    needle = f"EMELEX_TEST_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle in handle.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _shell_only(builder: Any) -> Any:
    return builder.include_file_tools(False)


async def test_shell_asks_every_call_with_exact_sentence(run_calls: Runner, ws_root: Path) -> None:
    approvals = ScriptedApprovals([True, False])
    call = Call("shell", {"command": "echo hi"})
    outcome = await run_calls([call, call], approvals)
    root = _real(ws_root)
    assert [a.reason for a in approvals.asked] == [
        f'run the shell command "echo hi" in "." (on disk "{root}") on the host '
        "(not sandboxed; timeout 120 s)"
    ] * 2
    ran, denied = outcome.tool_messages
    assert ran.splitlines()[1:] == ["[stdout: 3 bytes]", "hi", "[stderr: empty]"]
    assert ran.startswith("[exit code 0 after ")
    assert denied == "denied: denied by script"


async def test_default_policy_denies_shell(run_calls: Runner, ws_root: Path) -> None:
    outcome = await run_calls([Call("shell", {"command": "touch made-by-shell"})])
    assert outcome.executed == [False]
    assert outcome.tool_messages[0].startswith("denied: no approval policy")
    assert not (ws_root / "made-by-shell").exists()

    denied = await run_calls([Call("shell", {"command": "touch made-by-shell"})], DenyAll())
    assert denied.executed == [False]
    assert not (ws_root / "made-by-shell").exists()


async def test_environment_is_captured_and_scrubbed(
    run_calls: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EMELEX_SECRET_TOKEN", "s3cr3t")
    monkeypatch.setenv("PATH", "/usr/bin:relative/bin:/bin")
    model = ScriptedModel([[Call("shell", {"command": "env | sort"})], [Say("done")]])
    with AgentSession.builder(model, "/tmp").approval_policy(ApproveAll()).build() as session:
        monkeypatch.setenv("PATH", "/changed/after/build")  # built tools keep their copy
        with trio.fail_after(30):
            await session.run("go")
        [tool] = [m for m in session.history if m.role == "tool"]
        text = "".join(p.text for p in tool.content if hasattr(p, "text"))
    assert "s3cr3t" not in text
    assert "PATH=/usr/bin:/bin:/usr/local/bin\n" in text
    assert "LANG=C.UTF-8" in text
    assert "/changed/after/build" not in text


async def test_authority_identity_is_the_environment_digest(
    ws_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([])
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    first = AgentSession.builder(model, ws_root).authority_snapshot()
    [shell] = [tool for tool in first.tools if tool.name == "shell"]
    expected = environment_digest(build_shell_environment("/usr/bin:/bin", os.environ["HOME"]))
    assert dict(shell.identity) == {
        "path_sha256": expected.path_sha256,
        "home_sha256": expected.home_sha256,
    }
    monkeypatch.setenv("PATH", "/bin:/usr/bin")  # same directories, another order
    second = AgentSession.builder(model, ws_root).authority_snapshot()
    assert second != first
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert AgentSession.builder(model, ws_root).authority_snapshot() == first


async def test_cwd_subdirectory_and_refusals(run_calls: Runner, ws_root: Path) -> None:
    (ws_root / "sub").mkdir()
    os.symlink("/", ws_root / "root-link")
    approvals = ApproveAll()
    outcome = await run_calls(
        [
            Call("shell", {"command": "pwd", "cwd": "sub"}),
            Call("shell", {"command": "pwd", "cwd": "missing"}),
            Call("shell", {"command": "pwd", "cwd": "../outside"}),
            Call("shell", {"command": "pwd", "cwd": "root-link"}),
        ],
        approvals,
    )
    sub = _real(ws_root / "sub")
    assert approvals.asked[0].reason.startswith(
        f'run the shell command "pwd" in "sub" (on disk "{sub}")'
    )
    assert len(approvals.asked) == 3  # the '..' working directory was never offered
    ran, missing, parent, link = outcome.tool_messages
    assert f"\n{sub}\n" in ran
    assert missing == "shell: working directory 'missing': no such file or directory"
    assert "parent traversal" in parent
    assert "symbolic link" in link
    assert [o.is_error for o in outcome.outputs] == [False, True, True, True]


async def test_timeout_default_cap_and_result(run_calls: Runner) -> None:
    def configure(builder: Any) -> Any:
        return builder.include_file_tools(False).shell_timeout_seconds(1)

    approvals = ApproveAll()
    outcome = await run_calls(
        [
            Call("shell", {"command": "sleep 30", "timeout_seconds": 0.3}),
            Call("shell", {"command": "echo never", "timeout_seconds": 5}),
        ],
        approvals,
        configure=configure,
    )
    timed_out, too_long = outcome.tool_messages
    assert timed_out.startswith(
        "[timed out after 0.30 s: the command and every process it started were stopped"
    )
    assert outcome.outputs[0].is_error
    assert "invalid arguments at timeout_seconds" in too_long
    assert outcome.executed == [True, False]
    assert "(not sandboxed; timeout 0.30 s)" in approvals.asked[0].reason
    assert outcome.model.requests[0].tools[0].parameters["properties"]["timeout_seconds"][
        "maximum"
    ] == pytest.approx(1.0)


async def test_output_is_bounded_and_says_so(run_calls: Runner) -> None:
    def configure(builder: Any) -> Any:
        return builder.include_file_tools(False).shell_output_bytes(1000)

    outcome = await run_calls(
        [Call("shell", {"command": "yes abcdefghi | head -c 100000; echo oops >&2; exit 3"})],
        ApproveAll(),
        configure=configure,
    )
    [text] = outcome.tool_messages
    lines = text.splitlines()
    assert lines[0].startswith("[exit code 3 after ")
    assert lines[1] == (
        "[stdout: 100000 bytes; showing the first 500 and last 500, 99000 omitted in between]"
    )
    assert "[... 99000 bytes omitted ...]" in text
    assert lines[-2:] == ["[stderr: 5 bytes]", "oops"]
    assert outcome.outputs[0].is_error  # a non-zero exit
    assert len(text) < 1300


async def test_cancelled_turn_stops_every_process(ws_root: Path) -> None:
    marker = uuid.uuid4().hex
    fifo = ws_root / "ready.fifo"
    os.mkfifo(fifo)
    read_fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    hold_fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # reads block instead of EOF
    tagged = f"env EMELEX_TEST_MARKER={marker} sh -c"
    command = (
        f"{tagged} 'echo child > ready.fifo; exec sleep 300' & "
        f"setsid {tagged} 'echo escaped > ready.fifo; exec sleep 300' & "
        "wait"
    )
    model = ScriptedModel([[Call("shell", {"command": command})], [Say("done")]])
    cancellation = AgentCancellation()
    events: list[AgentEvent] = []
    with AgentSession.builder(model, ws_root).approval_policy(ApproveAll()).build() as session:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    with pytest.raises(TurnCancelled):
                        await session.run("go", cancellation=cancellation, on_event=events.append)

                nursery.start_soon(turn)
                ready = b""
                async with trio.lowlevel.FdStream(read_fd) as stream:
                    while ready.count(b"\n") < 2:
                        ready += await stream.receive_some(100)
                assert sorted(ready.split()) == [b"child", b"escaped"]
                assert len(_survivors(marker)) >= 2
                cancellation.cancel()
        os.close(hold_fd)
        assert _survivors(marker) == []
        tool_messages = [m for m in session.history if m.role == "tool"]
        assert len(tool_messages) == 1
        text = "".join(p.text for p in tool_messages[0].content if hasattr(p, "text"))
        assert text == (
            "shell: the turn was cancelled while the command ran; the command and every "
            "process it started were stopped (its output is not available)"
        )
        assert model.calls_made == 1  # the turn ended; no further model round


async def test_shell_switched_off_is_not_offered(run_calls: Runner) -> None:
    outcome = await run_calls(
        [Call("shell", {"command": "echo hi"})],
        ApproveAll(),
        configure=lambda b: b.include_shell_tool(False),
    )
    assert "shell" not in outcome.advertised
    assert outcome.executed == [False]
    assert "shell" in outcome.tool_messages[0]  # an unknown-tool error, not a run
