"""Answers as Markdown on a terminal (a real pty read by a VT100 emulator), inert
whatever the model writes, and the plain text of today when piped."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emelex.agent import AnswerDelta, TurnCompleted
from emelex.cli._answer import MIN_REDRAW_SECONDS, MarkdownAnswer
from emelex.cli._render import TerminalRenderer, safe
from emelex.model import Usage

from .pty_screen import PtyScreen
from .test_cli import run, script

ROWS, COLUMNS = 24, 80
#: rich markup, a rich link, a Markdown link, and raw escape sequences (a title, a
#: clear, an OSC 8 hyperlink, a clipboard write) inside an answer.
HOSTILE = (
    "**strong** [bold]not bold[/bold] [link=https://evil.example]click[/link] "
    "[docs](https://evil.example/x) "
    "\x1b]0;pwned\x07\x1b[2J\x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\"
    "\x1b]52;c;Y3VybA==\x07"
)


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[PtyScreen]:
    # rich sizes a console from the standard streams or COLUMNS/LINES: pin them.
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    monkeypatch.setenv("LINES", str(ROWS))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    screen = PtyScreen(ROWS, COLUMNS)
    yield screen
    screen.close()


def _done() -> TurnCompleted:
    return TurnCompleted("t", Usage(1, 1))


def test_a_hostile_answer_prints_inert_on_a_terminal(terminal: PtyScreen) -> None:
    renderer = TerminalRenderer(terminal.file, io.StringIO())
    for piece in (HOSTILE[:30], HOSTILE[30:70], HOSTILE[70:]):
        renderer(AnswerDelta("t", 1, piece))
    renderer(_done())
    raw = terminal.sync()
    # Nothing the model wrote reached the terminal as a control sequence: no title, no
    # clear, no hyperlink (rich's own OSC 8 included), no clipboard write.
    for sequence in (b"\x1b]0;", b"\x1b[2J", b"\x1b]8;", b"\x1b]52;", b"\x07"):
        assert sequence not in raw, sequence
    shown = " ".join(row for row in terminal.rows() if row)
    assert "[bold]not bold[/bold]" in shown  # markup shown, not obeyed
    assert "[link=https://evil.example]click[/link]" in shown
    assert "docs (https://evil.example/x)" in shown  # a link says where it goes
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1b]8;;https://evil.example" in shown
    # ... and it is Markdown: the emphasis is rendered, its asterisks are gone.
    assert "**" not in shown
    row = next(index for index, text in enumerate(terminal.rows()) if "strong" in text)
    column = terminal.rows()[row].index("strong")
    assert terminal.screen.buffer[row][column].bold
    assert not terminal.screen.buffer[row][terminal.rows()[row].index("not bold")].bold


def test_a_markdown_answer_ends_on_its_own_line_whole(terminal: PtyScreen) -> None:
    lines = [f"- item {index}" for index in range(ROWS * 2)]  # taller than the screen
    answer = MarkdownAnswer(terminal.file)
    for line in lines:
        answer.feed(line + "\n")
    assert answer.open
    answer.close()
    assert not answer.open
    terminal.sync()
    rows = [row for row in terminal.rows() if row]
    # Cropped while it streamed, printed whole at the end: the last item is on screen,
    # the cursor below it.
    assert rows[-1].endswith(f"item {ROWS * 2 - 1}")
    assert terminal.screen.cursor.y == ROWS - 1 and terminal.rows()[-1] == ""
    assert "..." not in rows[-1]


def test_redraws_are_spaced_whatever_the_delta_rate(terminal: PtyScreen) -> None:
    answer = MarkdownAnswer(terminal.file)
    started = time.monotonic()
    for index in range(2_000):
        answer.feed(f"w{index} ")
    elapsed = time.monotonic() - started
    answer.close()
    raw = terminal.sync()
    # rich hides the cursor once and redraws by erasing its rows: count the erasures.
    redraws = raw.count(b"\x1b[2K")
    assert redraws <= 10 * (elapsed / MIN_REDRAW_SECONDS + 2), (redraws, elapsed)
    assert "w1999" in terminal.text()


def test_piped_answers_are_byte_for_byte_the_model_text(tmp_path: Path) -> None:
    spec = script(tmp_path, [[{"say": HOSTILE[:40]}, {"say": HOSTILE[40:]}]])
    result = run("run", "--model", spec, "x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == safe(HOSTILE) + "\n"  # no Markdown, no styling, no wrapping


def test_a_renderer_to_a_pipe_writes_the_deltas_as_they_come() -> None:
    out, err = io.StringIO(), io.StringIO()
    renderer = TerminalRenderer(out, err)
    renderer(AnswerDelta("t", 1, "# not a heading\n"))
    assert out.getvalue() == "# not a heading\n"
    renderer(AnswerDelta("t", 1, "**x**"))
    renderer(_done())
    assert out.getvalue() == "# not a heading\n**x**\n" and err.getvalue() == ""
