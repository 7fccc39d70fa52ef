"""A real pseudo-terminal for in-process rendering tests: code under test writes to the
slave end (a text file that ``isatty()``), a thread drains the master end into a VT100
emulator (pyte), and :meth:`PtyScreen.sync` waits for an inert marker to know that
everything written before it has been read."""

from __future__ import annotations

import fcntl
import itertools
import os
import struct
import termios
import threading
from typing import TextIO

import pyte

_MARKS = itertools.count()


class PtyScreen:
    def __init__(self, rows: int = 24, columns: int = 80) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
        self.file: TextIO = open(slave, "w", encoding="utf-8", closefd=True)  # noqa: SIM115
        self.screen = pyte.Screen(columns, rows)
        self._stream = pyte.ByteStream(self.screen)
        self.raw = b""
        self._fed = 0
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                chunk = b""
            with self._changed:
                if not chunk:
                    self._changed.notify_all()
                    return
                self.raw += chunk
                self._changed.notify_all()

    def sync(self, timeout: float = 10.0) -> bytes:
        """Wait until everything written so far was read; return all the raw output
        before the marker (an OSC the emulator ignores) and feed it to the screen."""
        marker = f"\x1b]7777;{next(_MARKS)}\x07".encode()
        self.file.flush()
        os.write(self.file.fileno(), marker)
        with self._changed:
            assert self._changed.wait_for(lambda: marker in self.raw, timeout), self.raw[-300:]
            before, _, after = self.raw.partition(marker)
            self.raw = before + after
        self._stream.feed(before[self._fed :])
        self._fed = len(before)
        return before

    def rows(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display]

    def text(self) -> str:
        return "\n".join(self.rows())

    def close(self) -> None:
        self.file.close()
        self._reader.join(timeout=10)
        os.close(self.master)
