"""Small reads on the calling thread, without the hop to a reader thread.

A history page of 100 rows is an index range scan that SQLite answers in a fraction of a
millisecond; handing it to a reader thread and back costs more than the read itself
(two thread wake-ups, and far more on a loaded machine). So bounded reads run here, on
a read-only connection that belongs to the event loop's thread, under two rules that
keep the loop responsive:

- only reads whose size the caller bounds (a page of at most :data:`INLINE_ROWS` rows
  through an index) come here;
- the connection never waits for a lock (``busy_timeout`` 0): when SQLite reports the
  database busy or locked (a WAL recovery, a checkpoint that must reset the log), the
  read raises :class:`_InlineBusy` and the caller runs it on a reader thread instead.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from typing import Final, TypeVar

from emelex.store._schema import connect

T = TypeVar("T")

#: The largest page read on the calling thread; larger ones go to a reader thread.
INLINE_ROWS: Final = 200

_BUSY_CODES: Final = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED


class _InlineBusy(Exception):
    """The inline connection could not read without waiting: use a reader thread."""


class InlineReader:
    """A read-only connection owned by the first thread that reads through it.

    Opened lazily (the store may be created on one thread and used on another); a read
    from any other thread raises :class:`_InlineBusy`, so it falls back to a reader thread.
    """

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: sqlite3.Connection | None = None
        self._thread: int | None = None
        self._closed = False

    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` inside one read transaction (one snapshot).

        Raises :class:`_InlineBusy` instead of waiting, and ``sqlite3.Error`` otherwise.
        """
        db = self._connection()
        db.execute("BEGIN")
        try:
            return fn(db)
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF in _BUSY_CODES:
                raise _InlineBusy(str(exc)) from exc
            raise
        finally:
            if db.in_transaction:
                db.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._closed:
            raise _InlineBusy("the inline reader is closed")
        if self._db is None:
            self._db = connect(self._path, readonly=True)
            # Never wait on the event loop: a busy database goes to a reader thread.
            self._db.execute("PRAGMA busy_timeout=0")
            self._thread = threading.get_ident()
        elif self._thread != threading.get_ident():
            raise _InlineBusy("the inline reader belongs to another thread")
        return self._db

    def close(self) -> None:
        self._closed = True
        if self._db is not None and self._thread == threading.get_ident():
            self._db.close()
        self._db = None
