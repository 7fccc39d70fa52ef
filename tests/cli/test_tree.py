"""The actor tree drawn with rich: the words of the plain tree, one row per actor
within the width, names from another process inert; plain text when not a terminal."""

from __future__ import annotations

import io
import os
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.cells import cell_len

from emelex.cli._render import render_tree
from emelex.cli._tree import print_tree, tree_lines

from .test_cli import EMELEX
from .test_supervise import Terminal

SGR = re.compile(r"\x1b\[[0-9;]*m")


def _node(
    kind: str, name: str, children: list[dict[str, object]] | None = None
) -> dict[str, object]:
    return {
        "kind": kind,
        "name": name,
        "state": "running",
        "age_seconds": 1.0,
        "children": children or [],
    }


SNAPSHOT = {
    "supervisor": "app",
    "pid": 7,
    "actors": 4,
    "roots": [
        _node("session", "a", [_node("turn", "t1", [_node("tool", "x")])]),
        _node("service", "diagnostics"),
    ],
}


def test_tree_lines_say_what_the_plain_tree_says() -> None:
    lines = [SGR.sub("", line) for line in tree_lines(SNAPSHOT, 80)]
    plain = render_tree(SNAPSHOT).splitlines()
    assert lines[0] == plain[0] == "app (pid 7): 4 actors"
    assert len(lines) == len(plain)
    for styled, text in zip(lines[1:], plain[1:], strict=True):
        label = text.split("─ ", 1)[1]
        assert styled.endswith(label), (styled, label)
    # Only SGR styling: nothing moves the cursor or erases (the caller places rows).
    assert all("\x1b" not in SGR.sub("", line) for line in tree_lines(SNAPSHOT, 80))


def test_every_row_fits_the_width_whatever_the_names() -> None:
    long = "日本語" * 40 + "x" * 200
    snapshot = {**SNAPSHOT, "roots": [_node("session", long, [_node("turn", long)])]}
    for width in (20, 41, 80):
        lines = [SGR.sub("", line) for line in tree_lines(snapshot, width)]
        assert len(lines) == 3  # one row per node: names are cut, never wrapped
        assert all(cell_len(line) <= width for line in lines), (width, lines)
        assert lines[1].endswith("…")


def test_names_from_another_process_are_inert() -> None:
    hostile = _node("session", "[bold red]x[/bold red]\x1b]0;t\x07\u202e")
    snapshot = {**SNAPSHOT, "supervisor": "[link=https://e.example]s[/link]", "roots": [hostile]}
    lines = [SGR.sub("", line) for line in tree_lines(snapshot, 120)]
    assert lines[0].startswith("[link=https://e.example]s[/link] (pid 7)")
    assert "'[bold red]x[/bold red]\\x1b]0;t\\x07\\u202e'" in lines[1]
    assert not any(char in line for line in lines for char in "\x1b\x07\u202e")


def test_print_tree_is_the_plain_tree_when_not_a_terminal() -> None:
    out = io.StringIO()
    print_tree(SNAPSHOT, out)
    assert out.getvalue() == render_tree(SNAPSHOT) + "\n"


def _pump_until(terminal: Terminal, deadline: float, done: Callable[[], bool]) -> None:
    while not done():
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out; screen:\n{terminal.text()}"
        ready, _, _ = select.select([terminal.master], [], [], remaining)
        if ready:
            chunk = os.read(terminal.master, 65536)
            terminal.raw += chunk
            terminal.stream.feed(chunk)


APP = """\
import trio
from emelex.runtime import open_supervisor

async def main():
    async with open_supervisor("app") as sup:
        async with sup.open_actor("session", "demo"):
            await trio.sleep(60)

trio.run(main)
"""


def test_watching_a_socket_on_a_terminal_redraws_in_place(tmp_path: Path) -> None:
    program = tmp_path / "app.py"
    program.write_text(APP)
    socket = tmp_path / "d.sock"
    app = subprocess.Popen(
        [sys.executable, str(program)],
        # The documented variable (docs/cli.md), spelled out: a test of the contract.
        env={**os.environ, "EMELEX_DIAGNOSTICS_SOCKET": str(socket)},
        stdin=subprocess.DEVNULL,
    )
    terminal = Terminal()
    watcher = subprocess.Popen(
        [*EMELEX, "supervise", "--interval", "0.05", "--socket", str(socket)],
        cwd=tmp_path,
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
        close_fds=True,
        start_new_session=True,
    )
    os.close(terminal.slave)
    try:
        deadline = time.monotonic() + 60
        while not socket.exists():
            assert time.monotonic() < deadline and app.poll() is None
            time.sleep(0.05)
        _pump_until(terminal, deadline, lambda: terminal.raw.count(b"'demo'") >= 6)
        rows = terminal.rows()
        assert sum("session 'demo'" in row for row in rows) == 1, terminal.text()
        assert rows[0].startswith("app (pid ")
        assert b"\x1b[2J" not in terminal.raw  # redrawn over its own rows, no clear
        app.terminate()
        app.wait(timeout=30)
        terminal.pump(deadline)
        assert watcher.wait(timeout=30) == 4, terminal.text()  # the process went away
    finally:
        os.close(terminal.master)
        for process in (app, watcher):
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)
    assert "emelex: " in terminal.text() and "Traceback" not in terminal.text()
