"""Progress bars: on a terminal only, removed when done, drawn inert, never drawn more
often than the redraw budget allows; the renderer's plain progress lines elsewhere."""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emelex.agent import AnswerDelta, ModelProgress
from emelex.cli._progress import MIN_REDRAW_SECONDS, Bar, LoadBar
from emelex.cli._render import TerminalRenderer
from emelex.model import Progress
from emelex.model.llama import write_tiny_gguf

from .pty_screen import PtyScreen
from .test_cli import EMELEX, run
from .test_supervise import Terminal

ROWS, COLUMNS = 24, 80


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[PtyScreen]:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    monkeypatch.setenv("LINES", str(ROWS))
    monkeypatch.setenv("TERM", "xterm-256color")
    screen = PtyScreen(ROWS, COLUMNS)
    yield screen
    screen.close()


def test_no_bar_unless_stderr_is_a_terminal() -> None:
    err = io.StringIO()
    bar = LoadBar(err, "weights")
    assert not bar.visible
    for step in range(11):
        bar(step / 10)
    bar.close()
    assert err.getvalue() == ""


def test_a_load_bar_from_a_worker_thread_is_drawn_then_removed(terminal: PtyScreen) -> None:
    bar = LoadBar(terminal.file, "weights [bold]x[/bold]")
    assert bar.visible
    worker = threading.Thread(target=bar, args=(0.5,))
    worker.start()
    worker.join()
    terminal.sync()
    row = next(text for text in terminal.rows() if text)
    assert row.startswith("weights [bold]x[/bold]")  # a description is never markup
    assert "50%" in row
    bar.close()
    raw = terminal.sync()
    assert all(text == "" for text in terminal.rows())  # transient: nothing left
    assert raw.index(b"\x1b[?25h") > raw.index(b"\x1b[?25l")  # the cursor is back
    bar(1.0)  # after close: ignored
    assert terminal.sync() == raw


def test_redraws_stay_within_the_budget(terminal: PtyScreen) -> None:
    bar = Bar(terminal.file, "prompt", counts=True)
    started = time.monotonic()
    for done in range(20_000):
        bar.update(done, 20_000)
    elapsed = time.monotonic() - started
    bar.close()
    raw = terminal.sync()
    # The first draw and the last two (final state, then removal) are not spaced.
    assert 1 <= raw.count(b"prompt") <= elapsed / MIN_REDRAW_SECONDS + 3


def test_prompt_progress_is_a_bar_on_a_terminal_and_a_line_elsewhere(
    terminal: PtyScreen,
) -> None:
    out = io.StringIO()
    renderer = TerminalRenderer(out, terminal.file)
    renderer(ModelProgress("t", 1, Progress("prompt", 512, 2048)))
    terminal.sync()
    assert "512/2048" in terminal.text()
    renderer(AnswerDelta("t", 1, "hi"))  # the first token removes the bar
    terminal.sync()
    assert terminal.text().strip() == "" and out.getvalue() == "hi"
    # Without a terminal: the plain line of before, unchanged.
    out, err = io.StringIO(), io.StringIO()
    plain = TerminalRenderer(out, err)
    plain(ModelProgress("t", 1, Progress("prompt", 512, 2048)))
    assert err.getvalue() == "· prompt: 512/2048\n"


def test_emelex_run_draws_and_removes_its_bars_on_a_terminal_only(tmp_path: Path) -> None:
    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    command = ["run", "--model", f"llama:{model}", "--no-shell", "--no-file-tools"]
    command += ["--max-tokens", "4", "hi"]
    terminal = Terminal()
    process = subprocess.Popen(
        [*EMELEX, *command],
        cwd=tmp_path,
        stdin=terminal.slave,
        stdout=terminal.slave,
        stderr=terminal.slave,
        close_fds=True,
        env={**os.environ, "TERM": "xterm-256color"},
    )
    os.close(terminal.slave)
    try:
        terminal.pump(time.monotonic() + 120)
        assert process.wait(timeout=30) == 0, terminal.text()
    finally:
        os.close(terminal.master)
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    assert b"weights" in terminal.raw  # the load bar was drawn ...
    assert "weights" not in terminal.text()  # ... and removed
    assert terminal.raw.count(b"\x1b[?25l") == terminal.raw.count(b"\x1b[?25h") >= 1
    piped = run(*command, cwd=tmp_path)
    assert piped.returncode == 0, piped.stderr
    assert "weights" not in piped.stderr and "\x1b" not in piped.stderr + piped.stdout
