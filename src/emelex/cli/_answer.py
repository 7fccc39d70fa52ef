"""An answer rendered as Markdown while it streams to a terminal.

Only for a terminal: piped output stays the model's text, byte for byte (scripts read
it). The text is made :func:`safe` before ``rich`` sees it, and goes to
:class:`rich.markdown.Markdown`, which never interprets ``[bold]``-style markup; links
are shown as ``text (url)`` instead of terminal hyperlinks, so a model cannot make a
link's visible text lie about its target.
"""

from __future__ import annotations

import time
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.markdown import Markdown

from emelex.cli._safe import safe

#: Fewest seconds between two redraws; more when a redraw is slow (see ``_budget``).
MIN_REDRAW_SECONDS = 0.1
#: A redraw may take at most this share of the time: a long answer is re-parsed whole
#: on each redraw, so redraws space out as it grows instead of slowing the turn.
REDRAW_SHARE = 0.05


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
        return Markdown("".join(self._parts), hyperlinks=False)

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
