"""History pages read from the Trio thread itself: libpq in non-blocking mode through
psycopg's public low-level API (``psycopg.pq``), waiting on the connection's socket with
``trio.lowlevel.wait_readable``.

A call on a worker thread costs two thread wake-ups (there and back), which on a loaded
machine cost more than the page's query (docs/service/scale-out.md has the numbers);
here a page costs what the query costs. One connection: a caller that finds it busy
uses the worker threads instead, so concurrent readers still run in parallel. A call
cancelled mid-statement closes the connection (the next call opens a new one), so no
half-read result is ever left behind, and a read stuck on a silent network ends with its
caller's cancel scope.
"""

from __future__ import annotations

import select
from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import trio
from psycopg import pq
from psycopg.adapt import Transformer

_Db = psycopg.Connection[tuple[Any, ...]]
#: Socket reads a result may take without yielding to Trio (each up to libpq's buffer).
_READS_PER_YIELD = 32


class TrioReader:
    """One connection driven from the Trio thread, for prepared read statements."""

    def __init__(self, connect: Callable[[], _Db]) -> None:
        self._connect = connect  # blocking: run on a thread
        self._db: _Db | None = None
        self._prepared: set[bytes] = set()
        self.busy = False

    async def fetch(self, name: bytes, sql: bytes, params: Sequence[object]) -> list[Any]:
        """Every row of the statement ``sql`` (``$n`` placeholders; prepared once per
        connection as ``name``) with ``params`` (int, str or None), as tuples. Raises
        ``psycopg.Error``. Callers check :attr:`busy` first (one call at a time)."""
        if self.busy:
            raise RuntimeError("the reader runs one statement at a time")
        self.busy = True
        done = False
        try:
            if self._db is None:
                self._db = await trio.to_thread.run_sync(self._connect, abandon_on_cancel=False)
                self._db.pgconn.nonblocking = 1
                self._prepared.clear()
            db = self._db
            pgconn = db.pgconn
            if name not in self._prepared:
                pgconn.send_prepare(name, sql)
                await _result(pgconn)
                self._prepared.add(name)
            values = [None if p is None else str(p).encode() for p in params]
            # Binary results: numbers and booleans load without parsing text.
            pgconn.send_query_prepared(name, values, result_format=pq.Format.BINARY)
            result = await _result(pgconn)
            transformer = Transformer(db)
            transformer.set_pgresult(result)
            rows = transformer.load_rows(0, result.ntuples, tuple)
            done = True
            return rows
        finally:
            self.busy = False
            if not done:
                self.close()  # cancelled or failed mid-statement: never reuse it

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


async def _result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult:
    """Send what is queued and read every result of one statement; the last one."""
    socket = pgconn.socket
    while pgconn.flush():
        await trio.lowlevel.wait_writable(socket)
    # libpq reads at most one buffer (16 KiB at first) per call, and a page is often
    # more: what the server already sent is read at once, and only an empty socket
    # sends the task to the scheduler (a trip through it costs more than the read).
    # A long result still yields now and then (others run, cancellation reaches us).
    ready = select.poll()
    ready.register(socket, select.POLLIN)
    unyielded = 0
    last = None
    while True:
        while pgconn.is_busy():
            if not ready.poll(0):
                await trio.lowlevel.wait_readable(socket)
                unyielded = 0
            elif unyielded >= _READS_PER_YIELD:
                await trio.lowlevel.checkpoint()
                unyielded = 0
            unyielded += 1
            pgconn.consume_input()
        result = pgconn.get_result()
        if result is None:
            break
        last = result
    await trio.lowlevel.checkpoint_if_cancelled()
    if last is None:
        raise psycopg.OperationalError("the server sent no result")
    if last.status not in (pq.ExecStatus.TUPLES_OK, pq.ExecStatus.COMMAND_OK):
        message = (last.error_message or b"").decode("utf-8", "replace").strip()
        raise psycopg.DatabaseError(message or f"statement failed (status {last.status})")
    return last
