"""Progress bars on stderr: model loading and prompt processing.

A bar is drawn only when stderr is a terminal (a pipe or file gets the plain lines of
the renderer instead), is removed once its work is done, and is redrawn at most every
:data:`MIN_REDRAW_SECONDS` whatever the rate of updates, and less often when a redraw
is slow, so drawing never takes more than :data:`REDRAW_SHARE` of the time. Updates
never start a thread: the bar is drawn by the caller (rich's auto-refresh stays off).
"""

from __future__ import annotations

import threading
import time
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)

from emelex.cli._safe import safe

MIN_REDRAW_SECONDS = 0.05
#: A redraw may take at most this share of the time (a slow terminal or a loaded
#: machine spaces redraws out instead of slowing the work that reports progress).
REDRAW_SHARE = 0.05


class Bar:
    """One transient bar on ``err`` (nothing at all unless ``err`` is a terminal).

    ``update`` may be called from any thread (llama.cpp reports loading on the model's
    worker thread); ``close`` removes the bar and gives the cursor back. Idempotent.
    """

    def __init__(self, err: TextIO, description: str, *, counts: bool) -> None:
        self._lock = threading.Lock()
        self._description = safe(description)
        self._enabled = err.isatty()
        self._err = err
        self._counts = counts
        self._progress: Progress | None = None
        self._task: TaskID | None = None
        self._drawn = 0.0
        self._interval = MIN_REDRAW_SECONDS
        self._closed = False

    @property
    def visible(self) -> bool:
        return self._enabled

    def _start(self, total: float | None) -> Progress:
        amount = MofNCompleteColumn() if self._counts else TaskProgressColumn()
        progress = Progress(
            # markup=False: a description is shown, never parsed as rich markup.
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            amount,
            TimeElapsedColumn(),
            console=Console(file=self._err, highlight=False, emoji=False),
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = progress.add_task(self._description, total=total)
        progress.start()
        return progress

    def update(self, completed: float, total: float | None) -> None:
        if not self._enabled:
            return
        with self._lock:
            if self._closed:
                return
            started = time.monotonic()
            if started - self._drawn < self._interval:
                return  # rich's update alone costs about 0.1 ms: only for a redraw
            if self._progress is None:
                self._progress = self._start(total)
            assert self._task is not None
            self._progress.update(self._task, completed=completed, total=total)
            self._progress.refresh()
            self._drawn = time.monotonic()
            self._interval = max(MIN_REDRAW_SECONDS, (self._drawn - started) / REDRAW_SHARE)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            progress, self._progress = self._progress, None
            if progress is not None:
                progress.stop()


class LoadBar(Bar):
    """Model loading as a fraction (llama.cpp's ``progress_callback``): call it with
    0.0 … 1.0."""

    def __init__(self, err: TextIO, description: str) -> None:
        super().__init__(err, description, counts=False)

    def __call__(self, fraction: float) -> None:
        self.update(fraction, 1.0)
