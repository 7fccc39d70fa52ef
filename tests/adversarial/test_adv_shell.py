"""Issue 18 items 3 and 13: the shell runner's supervisor can be killed; length errors.

``kill -9 $PPID; sleep 7771`` killed the subreaper helper and left ``sleep`` running under
pid 1 in the tool's process group (the group was signalled only while the helper lived);
so did an OOM-style ``SIGKILL`` of the helper from outside. After every run a ``/proc``
scan looks for the command's processes (by an environment marker and by command line).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from emelex._errors import LimitExceeded
from emelex.tools._process import MAX_COMMAND_BYTES, build_shell_environment, run_shell


def _stat_fields(pid: str) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as handle:
        data = handle.read()
    return data[data.rfind(b")") + 2 :].split()


def _live(marker: str) -> list[tuple[int, bytes]]:
    """``(pid, cmdline)`` of live (non-zombie) processes carrying the marker."""
    needle = f"EMELEX_ADV_MARKER={marker}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                if needle not in handle.read():
                    continue
            if _stat_fields(entry)[0] in (b"Z", b"X"):
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                found.append((int(entry), handle.read().replace(b"\0", b" ")))
        except OSError:
            continue
    return found


@pytest.fixture
def marker() -> Iterator[str]:
    value = uuid.uuid4().hex
    yield value
    for pid, _cmdline in _live(value):  # never leave a failed test's processes behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _env(marker: str) -> dict[str, str]:
    env = build_shell_environment(os.environ.get("PATH"), os.environ.get("HOME"))
    env["EMELEX_ADV_MARKER"] = marker
    return env


async def test_a_command_that_kills_its_helper_leaves_nothing(tmp_path: Path, marker: str) -> None:
    with trio.fail_after(30):
        result = await run_shell(
            "kill -9 $PPID; sleep 7771",
            cwd=str(tmp_path),
            env=_env(marker),
            timeout=20,
            output_bytes=4096,
        )
    assert result.signal == signal.SIGKILL  # the helper's own death
    assert _live(marker) == []


async def _wait_for(marker: str, program: bytes) -> list[tuple[int, bytes]]:
    """Poll until a process runs ``program`` (its command line starts with it; the
    helper's and the shell's command lines merely contain the text)."""
    while True:
        found = _live(marker)
        if any(cmdline.startswith(program) for _pid, cmdline in found):
            return found
        await trio.sleep(0.01)


async def test_an_oom_style_kill_of_the_helper_leaves_nothing(tmp_path: Path, marker: str) -> None:
    # One escapee stays in the group, one leaves it (setsid) but keeps the output pipe.
    command = "setsid sleep 7772 & sleep 7771 & wait"
    outcome: list[float] = []
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:

            async def run() -> None:
                await run_shell(
                    command, cwd=str(tmp_path), env=_env(marker), timeout=20, output_bytes=4096
                )
                outcome.append(time.perf_counter())

            nursery.start_soon(run)
            await _wait_for(marker, b"sleep 7772")
            processes = await _wait_for(marker, b"sleep 7771")
            [helper] = [pid for pid, cmdline in processes if b"_subreaper.py" in cmdline]
            killed_at = time.perf_counter()
            os.kill(helper, signal.SIGKILL)  # what the OOM killer does
    assert _live(marker) == []
    assert outcome[0] - killed_at < 2.0  # not the 2 s pipe-drain give-up


async def test_the_normal_path_is_unchanged(tmp_path: Path, marker: str) -> None:
    with trio.fail_after(30):
        result = await run_shell(
            "echo hi; sleep 7773 &",
            cwd=str(tmp_path),
            env=_env(marker),
            timeout=20,
            output_bytes=4096,
        )
    assert result.exit_code == 0 and result.stdout.text() == "hi\n"
    assert _live(marker) == []


async def test_the_length_error_counts_bytes(tmp_path: Path) -> None:
    command = "é" * 60_000  # 60,000 characters, 120,000 bytes
    assert len(command) < MAX_COMMAND_BYTES < len(command.encode())
    with pytest.raises(LimitExceeded) as caught:
        await run_shell(command, cwd=str(tmp_path), env={}, timeout=5, output_bytes=10)
    assert caught.value.limit == "shell_command_bytes"
    assert caught.value.actual == 120_000
    assert "got 120000" in str(caught.value)


def _gone(pid: int) -> bool:
    try:
        return _stat_fields(str(pid))[0] in (b"Z", b"X")
    except OSError:
        return True


async def test_an_escapee_that_left_the_session_and_closed_the_pipes_dies(
    tmp_path: Path, marker: str
) -> None:
    """The escape docs/tools.md used to document: a descendant that ``setsid``-s, points
    every descriptor away from the output pipes, and only then kills the helper. Its group,
    session and pipes tie it to nothing; the run's environment marker still does."""
    pidfile = tmp_path / "escapee.pid"
    command = (
        "setsid sh -c 'echo $$ > escapee.pid; exec sleep 7774' "
        "</dev/null >/dev/null 2>&1 & "
        "while [ ! -s escapee.pid ]; do sleep 0.01; done; kill -9 $PPID; sleep 7775"
    )
    with trio.fail_after(30):
        result = await run_shell(
            command, cwd=str(tmp_path), env=_env(marker), timeout=20, output_bytes=4096
        )
    assert result.signal == signal.SIGKILL  # the helper's own death
    escapee = int(pidfile.read_text())
    assert _gone(escapee)
    assert _live(marker) == []
