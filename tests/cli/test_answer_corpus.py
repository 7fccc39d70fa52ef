"""Nothing a model writes is dropped from a terminal: a corpus of answers is rendered as
Markdown on a real pty, and every character of each answer (but Markdown's own syntax,
which becomes styling) is found among the screen's cells (pyte)."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

import pytest

from emelex.agent import AnswerDelta, TurnCompleted
from emelex.cli._render import TerminalRenderer, safe
from emelex.model import Usage

from .pty_screen import PtyScreen

#: Tall enough that no answer of the corpus scrolls off (pyte keeps no scrollback).
ROWS, COLUMNS = 200, 60

CORPUS = {
    "html block": "<p>\nA paragraph after a p tag.\n\n<div>inside a div</div>\n\nStill here.",
    "html inline": "Use <br> for a line break, <b>bold</b> and <script>alert(1)</script>.",
    "html comment": "before <!-- a comment --> after\n\n<!--\nhidden?\n-->\n\nend",
    "entities": "Write &lt;p&gt; or &amp;amp; or &#65; or &copy; as they are.",
    "unclosed fence": "Here is code:\n\n```\ndef f(x):\n    return x < 2 and x > 0\n",
    "unclosed tilde fence": "~~~\n<b>not bold</b>\nline two",
    "table": (
        "| name | value | note |\n|:-----|------:|:----:|\n"
        "| alpha | 1 | first row |\n| beta | 22 | " + "w" * 70 + " |\n"
        "| <i>x</i> | &amp; | `code` |"
    ),
    "wide table": "| "
    + " | ".join(f"column{index}" for index in range(12))
    + " |\n|"
    + "---|" * 12
    + "\n| "
    + " | ".join(f"cell{index}x" for index in range(12))
    + " |",
    "escapes": r"Not \*emphasis\*, a back\\slash, C:\path\to\file, 2 \< 3, \[x\]",
    "links and images": (
        "See [the docs](https://example.org/docs) and ![a chart](https://example.org/c.png)"
        "\n\n[ref]: https://example.org/ref\n\nand <https://example.org/auto>."
    ),
    "very long lines": ("word " * 60) + "\n\n" + "x" * 300 + "\n\n    " + "indented" * 20,
    "right to left": "שלום עולם, זו תשובה.\n\nمرحبا بالعالم، هذه إجابة.\n\nmixed עברית and English",  # noqa: RUF001
    # (no emoji joined by U+200D: pyte drops the rest of such a line, a real terminal does not)
    "wide and combining": "日本語の答え。 café e\u0301 👍 done",
    "lists and quotes": "1. one\n2. two\n   - nested <tag>\n\n> quoted <q>\n> more",
    "rich markup": "[bold]not bold[/bold] [red]x[/red] :smile: [link=https://e.x]y[/link]",
    "controls": "bell\x07 escape\x1b[31m red \u202e reversed",
}

#: Markdown syntax that rendering may turn into styling (emphasis, headings, code marks,
#: escapes, table rules and pipes, bullets, quote marks, link brackets, autolink angle
#: brackets): these alone need not be on the screen.
SYNTAX = frozenset("*_`#\\|-:>~[]<")


def _expected(text: str) -> Counter[str]:
    # A fence line is syntax whole (its info string names a lexer); an ordered list's
    # number stays, its dot is a marker; pyte composes combining marks (NFC).
    text = re.sub(r"(?m)^ *(```|~~~).*$", "", safe(text))
    text = unicodedata.normalize("NFC", re.sub(r"(?m)^( *\d+)[.)](?= )", r"\1", text))
    return Counter(char for char in text if not char.isspace() and char not in SYNTAX)


def _shown(screen: PtyScreen) -> Counter[str]:
    return Counter(char for char in screen.text() if not char.isspace())


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[PtyScreen]:
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    monkeypatch.setenv("LINES", str(ROWS))
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    screen = PtyScreen(ROWS, COLUMNS)
    yield screen
    screen.close()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_character_of_an_answer_is_on_the_screen(name: str, terminal: PtyScreen) -> None:
    text = CORPUS[name]
    renderer = TerminalRenderer(terminal.file, terminal.file)
    for start in range(0, len(text), 7):  # streamed in small deltas, as a model does
        renderer(AnswerDelta("t", 1, text[start : start + 7]))
    renderer(TurnCompleted("t", Usage(1, 1)))
    terminal.sync()
    missing = _expected(text) - _shown(terminal)
    assert not missing, (dict(missing), terminal.text())


def test_html_reads_literally_in_order(terminal: PtyScreen) -> None:
    renderer = TerminalRenderer(terminal.file, terminal.file)
    renderer(AnswerDelta("t", 1, "Use <br> for a line break\n\n<p>\nkept paragraph"))
    renderer(TurnCompleted("t", Usage(1, 1)))
    terminal.sync()
    shown = " ".join(row.strip() for row in terminal.rows() if row.strip())
    assert "Use <br> for a line break" in shown
    assert "<p> kept paragraph" in shown
