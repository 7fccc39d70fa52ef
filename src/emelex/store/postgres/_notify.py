"""Commit notifications on PostgreSQL: a listening connection on its own thread.

Every append notifies ``emelex_events`` with ``session:sequence`` at commit, to every
Host listening; a notification is only a wake-up (rows are always read from the tables)
and may be lost (a reconnect, a full channel), so callers also catch up periodically.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import psycopg
import trio

from emelex.runtime import WorkerJob, open_dedicated_worker
from emelex.store._errors import StoreError
from emelex.store.postgres._connection import Db, close_db, describe
from emelex.store.postgres._schema import CHANNEL

#: How long the listener waits for a notification before it checks for cancellation.
_LISTEN_POLL_SECONDS: Final = 0.2


@asynccontextmanager
async def listen_for_commits(
    dsn: str, path: str
) -> AsyncIterator[trio.MemoryReceiveChannel[tuple[str, int]]]:
    """Every commit's ``(session_id, sequence)`` as other connections (other Hosts too)
    make them. Raises :class:`StoreError` when the database cannot be listened to."""
    send, receive = trio.open_memory_channel[tuple[str, int]](1024)

    def open_listener() -> Db:
        db: Db = psycopg.connect(dsn, autocommit=True, application_name="emelex")
        db.execute("LISTEN " + CHANNEL)
        return db

    def listen(job: WorkerJob[Db, None]) -> None:
        db = job.resource
        while not job.aborted:
            for note in db.notifies(timeout=_LISTEN_POLL_SECONDS):
                session_id, _, sequence = note.payload.rpartition(":")
                if session_id and sequence.isdigit():
                    job.emit((session_id, int(sequence)))

    async def forward(job: WorkerJob[Db, None]) -> None:
        async with send:
            async for batch in job.batches():
                for item in batch:
                    # A slow reader loses wake-ups only: the catch-up query covers it.
                    with contextlib.suppress(trio.WouldBlock):
                        send.send_nowait(item)

    try:
        async with (
            open_dedicated_worker(
                "postgres-listener", setup=open_listener, teardown=close_db
            ) as worker,
            worker.job(listen) as job,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(forward, job)
            try:
                yield receive
            finally:
                nursery.cancel_scope.cancel()
    except psycopg.Error as exc:
        raise StoreError(f"store {path}: {describe(exc)}") from exc
