"""An answer rendered as Markdown while it streams to a terminal.

Only for a terminal: piped output stays the model's text, byte for byte (scripts read
it). The text is made :func:`safe` before ``rich`` sees it, and goes to
:class:`ShownMarkdown`, which never interprets ``[bold]``-style markup; links are shown
as ``text (url)`` instead of terminal hyperlinks, so a model cannot make a link's
visible text lie about its target.

Whatever a model writes stays on the screen: only Markdown's own syntax (emphasis
marks, fences, table rules, escapes) turns into styling. ``rich`` alone would drop HTML
blocks and tags, reference definitions and image addresses, and cut table cells with an
ellipsis; :class:`ShownMarkdown` parses with those rules off and folds long cells.
"""

from __future__ import annotations

import time
from typing import ClassVar, TextIO

from markdown_it import MarkdownIt
from rich.console import Console, JustifyMethod
from rich.live import Live
from rich.markdown import Markdown, MarkdownElement, TableDataElement
from rich.text import Text

from emelex.cli._safe import safe

#: Fewest seconds between two redraws; more when a redraw is slow (see ``_budget``).
MIN_REDRAW_SECONDS = 0.1
#: A redraw may take at most this share of the time: a long answer is re-parsed whole
#: on each redraw, so redraws space out as it grows instead of slowing the turn.
REDRAW_SHARE = 0.05


#: CommonMark with tables and strikethrough, as ``rich`` parses it, minus every rule
#: whose text ``rich`` would not show: raw HTML (``html``: it is dropped whole, a
#: paragraph after ``<p>`` with it), entities (``&lt;`` would show as ``<``, hiding what
#: was written), images (the address is dropped; without the rule ``![a](u)`` reads
#: ``!a (u)``) and reference definitions (a ``[r]: url`` line vanishes).
_PARSER = (
    MarkdownIt("commonmark", {"html": False})
    .enable(["strikethrough", "table"])
    .disable(["entity", "image", "reference"])
)


class _FoldedCell(TableDataElement):
    """A table cell that wraps a word too long for its column instead of cutting it
    with an ellipsis (``rich``'s table default)."""

    def __init__(self, justify: JustifyMethod) -> None:
        super().__init__(justify)
        self.content = Text("", justify=justify, overflow="fold")


class ShownMarkdown(Markdown):
    """:class:`rich.markdown.Markdown` that shows every character of ``text`` but
    Markdown's own syntax (see :data:`_PARSER`)."""

    elements: ClassVar[dict[str, type[MarkdownElement]]] = {
        **Markdown.elements,
        "td_open": _FoldedCell,
        "th_open": _FoldedCell,
    }

    def __init__(self, text: str) -> None:
        super().__init__("", hyperlinks=False)  # parses nothing: the text is parsed below
        self.markup = text
        self.parsed = _PARSER.parse(text)


class MarkdownAnswer:
    """Collects an answer's deltas and redraws it as Markdown in place (rich ``Live``),
    cropped to the screen while it streams and printed whole when it ends."""

    def __init__(self, out: TextIO) -> None:
        self._console = Console(file=out, highlight=False, emoji=False)
        self._parts: list[str] = []
        self._live: Live | None = None
        self._drawn = 0.0
        self._interval = MIN_REDRAW_SECONDS

    @property
    def open(self) -> bool:
        return self._live is not None

    def _markdown(self) -> Markdown:
        return ShownMarkdown("".join(self._parts))

    def _draw(self, live: Live) -> None:
        started = time.monotonic()
        live.update(self._markdown(), refresh=True)
        took = time.monotonic() - started
        self._drawn = time.monotonic()
        self._interval = max(MIN_REDRAW_SECONDS, took / REDRAW_SHARE)

    def feed(self, text: str) -> None:
        self._parts.append(safe(text))
        if self._live is None:
            self._live = Live(
                console=self._console,
                auto_refresh=False,
                vertical_overflow="ellipsis",
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        if time.monotonic() - self._drawn >= self._interval:
            self._draw(self._live)

    def close(self) -> None:
        """Draw the whole answer (every line, also those past the screen) and end it."""
        live, self._live = self._live, None
        if live is None:
            return
        live.update(self._markdown(), refresh=False)
        live.stop()  # redraws once more, uncropped
        self._parts.clear()
        self._drawn = 0.0
        self._interval = MIN_REDRAW_SECONDS
