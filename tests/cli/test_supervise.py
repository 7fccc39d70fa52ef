"""``emelex supervise -- PROGRAM`` on a real pseudo-terminal: the program reads what is
typed, and its output survives the tree's redraws (checked on an emulated screen)."""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pyte

from tests.cli.test_cli import EMELEX, run, script

ROWS, COLUMNS, TREE_ROWS = 30, 100, 8

CHILD = """\
import sys
import trio
from emelex.runtime import open_supervisor

async def main():
    async with open_supervisor("app") as sup:
        async with sup.open_actor("session", "demo"):
            for i in range(5):
                print(f"before-{i}", flush=True)
            print("name? ", end="", flush=True)
            line = await trio.to_thread.run_sync(sys.stdin.readline)
            print(f"child got: {line.strip()}", flush=True)
            for i in range(8):
                print(f"after-{i}", flush=True)
                await trio.sleep(0.15)

trio.run(main)
"""


class Terminal:
    """The test's side of a pty, fed into a VT100 emulator."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        size = struct.pack("HHHH", ROWS, COLUMNS, 0, 0)
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, size)
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""

    def pump(self, deadline: float, until: bytes | None = None) -> bool:
        """Feed output to the screen until ``until`` appears in the raw output (True) or
        the pty closes (False)."""
        while until is None or until not in self.raw:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"timed out; screen:\n{self.text()}"
            ready, _, _ = select.select([self.master], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return False
            if not chunk:
                return False
            self.raw += chunk
            self.stream.feed(chunk)
        return True

    def rows(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.rows())


def start(terminal: Terminal, args: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [*EMELEX, "supervise", "--interval", "0.05", "--tree-lines", str(TREE_ROWS), *args],
        cwd=cwd,
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
        close_fds=True,
        start_new_session=True,
    )
    os.close(terminal.slave)
    return process


def test_split_mode_passes_stdin_and_keeps_the_program_output(tmp_path: Path) -> None:
    program = tmp_path / "child.py"
    program.write_text(CHILD)
    terminal = Terminal()
    process = start(terminal, ["--", sys.executable, str(program)], tmp_path)
    try:
        deadline = time.monotonic() + 60
        terminal.pump(deadline, b"name? ")
        # A tree was drawn meanwhile (styled: the kind and the name are separate runs).
        terminal.pump(deadline, b"'demo'")
        os.write(terminal.master, b"hello there\n")
        terminal.pump(deadline, b"after-7")
        # Everything the program wrote is on screen, in order, above the tree region,
        # even though the tree was redrawn many times while it wrote.
        program_rows = terminal.rows()[: ROWS - TREE_ROWS]
        expected = [f"before-{i}" for i in range(5)]
        expected += ["name? hello there", "child got: hello there"]
        expected += [f"after-{i}" for i in range(8)]
        # (The terminal echoes the typed line itself, at the cursor: in the program's
        # rows, unless it lands in the microseconds of a redraw, hence the alternative.)
        if program_rows[5] == "name? child got: hello there":
            expected[5:7] = ["name? child got: hello there"]
        assert program_rows[: len(expected)] == expected, terminal.text()
        tree_rows = terminal.rows()[ROWS - TREE_ROWS :]
        assert tree_rows[0].startswith("app (pid ")
        assert any("session 'demo'" in row for row in tree_rows)
        assert terminal.raw.count(b"\x1b7") >= 5  # redrawn while the program ran
        assert b"\x1b[2J" not in terminal.raw  # the screen was never cleared
        terminal.pump(deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(terminal.master)
        if process.poll() is None:
            process.kill()
    # The whole screen is given back: the last tree stays below the program's output.
    final = terminal.text()
    assert "child got: hello there" in final and "after-7" in final
    assert "session 'demo'" in final
    assert terminal.screen.margins is None  # no scroll region left behind


def test_an_agent_under_supervise_gets_its_approval_answer(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    rounds = [
        [{"call": "write_file", "arguments": {"path": "out.txt", "content": "approved"}}],
        [{"say": "written"}],
    ]
    terminal = Terminal()
    process = start(
        terminal,
        ["--", *EMELEX, "run", "--model", script(tmp_path, rounds), "write it"],
        workspace,
    )
    try:
        deadline = time.monotonic() + 60
        terminal.pump(deadline, b"[y/N]")
        os.write(terminal.master, b"y\n")
        terminal.pump(deadline, b"written")
        terminal.pump(deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(terminal.master)
        if process.poll() is None:
            process.kill()
    assert (workspace / "out.txt").read_text() == "approved"
    final = terminal.text()
    assert "Approve write_file?" in final and "written" in final
    assert "emelex run (pid " in final  # the run's own tree, kept below its output


def test_tree_file_leaves_the_terminal_to_the_program(tmp_path: Path) -> None:
    program = tmp_path / "child.py"
    program.write_text(CHILD)
    trees = tmp_path / "trees.txt"
    result = subprocess.run(
        [
            *EMELEX,
            "supervise",
            "--interval",
            "0.05",
            "--tree-file",
            str(trees),
            "--",
            sys.executable,
            str(program),
        ],
        cwd=tmp_path,
        input="from a pipe\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "child got: from a pipe" in result.stdout  # stdin reached the program
    assert "\x1b" not in result.stdout  # nothing drawn over the program's output
    assert result.stdout.splitlines()[-1] == "after-7"
    drawn = trees.read_text()
    assert drawn.count("app (pid ") >= 3
    assert "session 'demo'" in drawn


def test_split_needs_a_terminal_and_a_program_must_exist(tmp_path: Path) -> None:
    split = run("supervise", "--split", "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert split.returncode == 2
    assert "--split needs a terminal" in split.stderr
    missing = run("supervise", "--", "no-such-program-xyz", cwd=tmp_path)
    assert missing.returncode == 127
    assert "program not found: no-such-program-xyz" in missing.stderr


RESIZED_CHILD = """\
import os
import trio
from emelex.runtime import open_supervisor

async def main():
    async with open_supervisor("app") as sup:
        async with sup.open_actor("session", "demo"):
            for i in range(40):
                print(f"size {i} {os.get_terminal_size(1).lines}", flush=True)
                await trio.sleep(0.05)

trio.run(main)
"""


def test_split_follows_a_terminal_resize(tmp_path: Path) -> None:
    program = tmp_path / "child.py"
    program.write_text(RESIZED_CHILD)
    terminal = Terminal()
    process = start(terminal, ["--", sys.executable, str(program)], tmp_path)
    try:
        deadline = time.monotonic() + 60
        terminal.pump(deadline, f"size 2 {ROWS - TREE_ROWS}".encode())
        taller = ROWS + 10
        fcntl.ioctl(terminal.master, termios.TIOCSWINSZ, struct.pack("HHHH", taller, 100, 0, 0))
        terminal.screen.resize(taller, COLUMNS)
        terminal.pump(deadline, f" {taller - TREE_ROWS}\r".encode())  # the program sees it
        terminal.pump(deadline)
        assert process.wait(timeout=30) == 0
    finally:
        os.close(terminal.master)
        if process.poll() is None:
            process.kill()
    assert f"\x1b[1;{taller - TREE_ROWS}r".encode() in terminal.raw  # the region moved
    # At the end the whole screen scrolled up one row to leave the cursor below the tree;
    # the program's cursor row (blank) separates its output from the tree.
    rows = terminal.rows()[:-1]
    assert rows[-TREE_ROWS - 2 :][:2] == [f"size 39 {taller - TREE_ROWS}", ""], terminal.text()
    assert rows[-TREE_ROWS].startswith("app (pid ")
    assert any("session 'demo'" in row for row in rows[-TREE_ROWS:])
