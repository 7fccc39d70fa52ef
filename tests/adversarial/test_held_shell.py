"""Issue 18, attacks that held: shell escapes by nohup, setsid, double fork and a
TERM-ignoring leader.

Each command tries to leave a process behind after the tool returns. After every run a
``/proc`` scan (by an environment marker) must find none of the command's processes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from emelex.tools._process import run_shell

from .test_adv_shell import _env, _live


@pytest.fixture
def tag() -> Iterator[str]:
    value = uuid.uuid4().hex
    yield value
    for pid, _cmdline in _live(value):  # never leave a failed test's processes behind
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


ESCAPES = {
    "nohup": "nohup sleep 7781 >/dev/null 2>&1 & echo started",
    "setsid": "setsid sleep 7782 >/dev/null 2>&1 < /dev/null & echo started",
    "double-fork": "( ( sleep 7783 >/dev/null 2>&1 & ) & ) ; echo started",
    "nohup-setsid": "nohup setsid sh -c 'sleep 7784' >/dev/null 2>&1 & echo started",
    "disown": "sleep 7785 & disown; echo started",
    "trap-term": "( trap '' TERM HUP; sleep 7786 ) >/dev/null 2>&1 & echo started",
}


@pytest.mark.parametrize("name", sorted(ESCAPES))
async def test_escapes_do_not_outlive_the_command(tmp_path: Path, tag: str, name: str) -> None:
    with trio.fail_after(30):
        result = await run_shell(
            ESCAPES[name], cwd=str(tmp_path), env=_env(tag), timeout=20, output_bytes=4096
        )
    assert result.exit_code == 0
    assert _live(tag) == []
