"""Connections of the PostgreSQL store: opening one with the store's server settings,
reopening it after it broke, and interrupting a statement its caller gave up on.

The connection string's password never leaves this process's memory: errors and logs
name the database by :func:`redact_dsn`, and :func:`describe` keeps psycopg's own
messages (which name host, port and user, never the password).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from typing import Any, Final

import psycopg
import psycopg.conninfo

#: Connections (each on its own worker thread) a store opens by default.
DEFAULT_POOL_SIZE: Final = 4
MAX_POOL_SIZE: Final = 32
#: A statement running longer fails (a blocked database never holds a Host forever).
DEFAULT_STATEMENT_SECONDS: Final = 30.0
#: How long opening a connection may take (libpq ``connect_timeout``, unless the
#: connection string sets one): a reconnect through a silent network fails, not hangs.
DEFAULT_CONNECT_SECONDS: Final = 10


Db = psycopg.Connection[tuple[Any, ...]]


def redact_dsn(dsn: str) -> str:
    """The connection string without its password (for errors and logs)."""
    try:
        parts = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "postgresql://(unparsable connection string)"
    host = str(parts.get("host") or "")
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    name = str(parts.get("dbname") or "")
    return f"postgresql://{user}{host}{port}/{name}"


class Connection:
    """One worker's connection, opened again after it broke (the next job reconnects).

    A job that its caller gave up on (cancelled: a timeout, a lease that lapsed) may be
    blocked on a socket nobody answers (a partitioned network): :meth:`interrupt` shuts
    that socket down from the Trio thread, so the job fails at once and the worker is
    free again; the next job reconnects (within ``connect_timeout``)."""

    def __init__(self, dsn: str, where: str, statement_seconds: float) -> None:
        self._dsn = dsn
        self._where = where
        self._statement_seconds = statement_seconds
        self._db: Db | None = None
        self._lock = threading.Lock()
        self._active: tuple[object, int] | None = None  # (job, socket) while a job runs

    def get(self) -> Db:
        if self._db is None or self._db.closed or self._db.broken:
            if self._db is not None:
                self._db.close()
            self._db = connect(self._dsn, self._statement_seconds)
        return self._db

    def begin(self, job: object) -> Db:
        """On the worker thread: the connection for ``job``, which may be interrupted."""
        db = self.get()
        with self._lock:
            self._active = (job, db.pgconn.socket)
        return db

    def end(self) -> None:
        with self._lock:
            self._active = None

    def interrupt(self, job: object) -> None:
        """From any thread: break the connection if ``job`` still runs on it."""
        with self._lock:
            if self._active is None or self._active[0] is not job:
                return
            # A duplicate of the descriptor: shutting it down ends the shared socket
            # (libpq's own descriptor stays valid and is closed by psycopg later).
            with contextlib.suppress(OSError), socket.socket(fileno=os.dup(self._active[1])) as s:
                s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()


def connect(dsn: str, statement_seconds: float) -> Db:
    """A store connection (blocking): autocommit, the server settings of
    :func:`connection_options`, and ``connect_timeout`` unless ``dsn`` sets one."""
    extra: dict[str, Any] = {}
    with contextlib.suppress(psycopg.Error):
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(dsn):
            extra["connect_timeout"] = DEFAULT_CONNECT_SECONDS
    return psycopg.connect(
        dsn,
        autocommit=True,
        options=connection_options(statement_seconds),
        application_name="emelex",
        **extra,
    )


def connection_options(statement_seconds: float) -> str:
    """The server settings of every store connection: a statement running longer than
    ``statement_seconds`` fails, and a transaction left idle for half that (its client
    cut off or paused mid-transaction) is ended by the server, so its row locks do not
    hold other Hosts up forever. Half: a statement waiting on those locks must outlast
    the dead transaction, or both give up at the same moment."""
    milliseconds = int(statement_seconds * 1000)
    return (
        f"-c statement_timeout={milliseconds}"
        f" -c idle_in_transaction_session_timeout={milliseconds // 2}"
    )


def close_db(db: Db) -> None:
    db.close()


def describe(exc: psycopg.Error) -> str:
    """``exc``'s message on one line (psycopg's name host, port and user, never the
    password)."""
    return " ".join(str(exc).split()) or type(exc).__name__
