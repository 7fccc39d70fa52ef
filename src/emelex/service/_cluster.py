"""Several Hosts on one PostgreSQL database: follow every session, run only leased ones.

Every Host keeps every session's state in memory and follows the shared event log: a
notification (``session:sequence``) or the periodic catch-up query says a session moved,
and the Host reads the new events from the tables and applies them as recovery does
(admissions join the queue, starts and ends move it, resolutions answer a waiting
approval, rows go to this Host's watchers). So reads and watches work on every Host.

Work runs only on the session's lease holder. A Host with work for a session it does not
hold tries to take the lease (it succeeds when nobody holds it or the holder let it
lapse), settles what the previous holder left unfinished by the harness rules, and runs
the queue. Every write the holder makes for the session's work (from its runner task or
a task of its turn) carries the lease: the store commits it only while the lease's token
is current, so a paused or cut-off Host that lost its lease commits nothing more; it
abandons the turn and follows the new holder's events instead.
"""

from __future__ import annotations

import contextvars
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from emelex._ids import new_id
from emelex.agent import current_turn
from emelex.service._rows import page_row, store_position, wire_position
from emelex.store import AppendResult, Lease, LeaseLost, NewEvent, OperationRecord, StoreError

if TYPE_CHECKING:
    from emelex.service._registry import SessionRegistry
    from emelex.service._session import HostSession as _SessionState
    from emelex.store.postgres import PostgresStore

logger = logging.getLogger("emelex.service")

#: The session whose work the current task runs (set in that session's runner task).
_RUNNING: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "emelex_running_session", default=None
)

DEFAULT_LEASE_SECONDS: Final = 10.0
DEFAULT_CATCH_UP_SECONDS: Final = 1.0
#: How long after another Host's lease would lapse a waiting Host asks for it again
#: (the database's clock decides, after the round trip that reported the lapse).
_AFTER_LAPSE: Final = 0.01


@attrs.frozen
class ScaleOut:
    """Tuning of a Host sharing its PostgreSQL store with other Hosts.

    ``lease_seconds``: how long a session stays with a Host that stopped renewing (the
    failover delay after a crash); renewed every third of it. ``catch_up_seconds``: the
    longest a watcher on another Host waits when a notification was lost.
    """

    lease_seconds: float = attrs.field(default=DEFAULT_LEASE_SECONDS)
    catch_up_seconds: float = attrs.field(default=DEFAULT_CATCH_UP_SECONDS)

    @lease_seconds.validator
    def _check_lease(self, _: object, value: float) -> None:
        if not 0.2 <= value <= 3600:
            raise ValueError("lease_seconds must be between 0.2 and 3600")

    @catch_up_seconds.validator
    def _check_catch_up(self, _: object, value: float) -> None:
        if not 0.01 <= value <= 600:
            raise ValueError("catch_up_seconds must be between 0.01 and 600")


class Cluster:
    """The Host's part in a group of Hosts on one database (see the module docs)."""

    def __init__(
        self,
        registry: SessionRegistry,
        store: PostgresStore,
        options: ScaleOut,
        session_config: Callable[[str], Awaitable[dict[str, Any] | None]],
    ) -> None:
        self._registry = registry
        self._session_config = session_config
        self._store = store
        self.options = options
        #: Unique per Host process and open: a restarted Host is a new holder.
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{new_id()}"
        self._leases: dict[str, Lease] = {}
        #: When each held lease lapses by this Host's clock (``trio.current_time``),
        #: counted from before the statement that took or renewed it was sent, so never
        #: later than the database's own expiry.
        self._expires: dict[str, float] = {}
        self._renewing: set[str] = set()
        self._loading: set[str] = set()
        self._scope = trio.CancelScope()

    # -- hooks the Host calls ---------------------------------------------------------------
    def holds(self, session_id: str) -> bool:
        return session_id in self._leases

    def enter_runner(self, state: _SessionState) -> None:
        """Called at the top of a session's runner task: its writes are fenced."""
        _RUNNING.set(state.session_id)

    async def append(
        self,
        state: _SessionState,
        events: Sequence[NewEvent],
        operation: OperationRecord | None,
    ) -> AppendResult:
        """Append for the Host (caller holds the session's lock). Writes of the running
        work carry the lease; events other Hosts appended first are applied before the
        caller applies its own."""
        session_id = state.session_id
        lease = None
        turn = current_turn()
        if _RUNNING.get() == session_id or (turn is not None and turn[0] == session_id):
            lease = self._leases.get(session_id)
            if lease is None:
                raise LeaseLost(session_id, 0)
        try:
            result = await self._store.append_events(
                session_id, events, operation=operation, lease=lease
            )
        except LeaseLost:
            logger.warning(
                "session %s: the database refused a write, the lease (token %d) moved",
                session_id,
                lease.token if lease is not None else 0,
            )
            self._lost(session_id)
            raise
        if not result.replayed and result.sequences[0] > state.revision + 1:
            # Other Hosts' events come first in the log, so they are applied first.
            await self._apply(state, until=result.sequences[0] - 1)
        return result

    async def claim(self, state: _SessionState) -> bool:
        """Make sure this Host holds the session's lease before running its work: take
        it when free or lapsed (then settle what the last holder left unfinished), else
        wait until something changes or the lease may have lapsed. Returns whether the
        runner may run now (call again when False)."""
        session_id = state.session_id
        if session_id in self._leases:
            return True
        asked = trio.current_time()
        poll = self.options.lease_seconds / 3
        try:
            lease = await self._store.try_lease(session_id, self.holder, self.options.lease_seconds)
        except StoreError as exc:
            logger.warning("cannot take the lease of session %s: %s", session_id, exc)
            lease = poll
        if not isinstance(lease, Lease):
            # Held by another Host: ask again when something changes, or just after its
            # lease would lapse (a crashed holder's sessions move at once, not a poll
            # later), and at least every third of a lease.
            state.wake = trio.Event()
            with trio.move_on_after(min(poll, lease + _AFTER_LAPSE)):
                await state.wake.wait()
            return False
        self._leases[session_id] = lease
        self._expires[session_id] = asked + self.options.lease_seconds
        async with state.lock:
            await self._apply(state)  # everything the last holder committed
            if state.app is not None:
                # Its history may lack turns other Hosts ran: start again from the store.
                with trio.CancelScope(shield=True):
                    await state.app.aclose()
                state.app = None
        # The runner settles what the last holder left started (under this lease).
        return True

    def abandon(self, state: _SessionState, error: StoreError) -> None:
        """The lease moved while this Host ran the session's work (or the database
        failed mid-write, so whether the write landed is unknown): nothing more of it
        commits here; the lease holder (this Host again, once it retakes the lease)
        settles it from the log, whose events reach this Host."""
        if isinstance(error, LeaseLost):
            logger.warning(
                "session %s moved to another Host while this one ran it: turn abandoned",
                state.session_id,
            )
        else:
            logger.warning(
                "session %s: a write of its running work failed (%s): turn abandoned",
                state.session_id,
                error,
            )
        self._lost(state.session_id)
        state.cancellation = None
        state.wake.set()

    # -- tasks ------------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Follow notifications, catch up periodically and renew leases, until the Host
        closes."""
        with self._scope:
            async with self._store.notifications() as notes, trio.open_nursery() as nursery:
                nursery.start_soon(self._renew_leases)
                nursery.start_soon(self._catch_up_loop)
                task_status.started()
                async for session_id, sequence in notes:
                    await self._moved(session_id, sequence)

    def close(self) -> None:
        """Stop following (the Host is closing; its runners settle their turns)."""
        self._scope.cancel()

    async def release_all(self) -> None:
        """Give every held session up, so another Host takes it without waiting."""
        for lease in tuple(self._leases.values()):
            try:
                await self._store.release_lease(lease)
            except StoreError as exc:
                logger.warning("cannot release session %s: %s", lease.session_id, exc)
        self._leases.clear()
        self._expires.clear()

    async def _catch_up_loop(self) -> None:
        while True:
            await trio.sleep(self.options.catch_up_seconds)
            try:
                newest = await self._store.sequences()
            except StoreError as exc:
                logger.warning("catch-up query failed: %s", exc)
                continue
            for session_id, sequence in newest.items():
                await self._moved(session_id, sequence)

    async def _renew_leases(self) -> None:
        """Renew every held lease each third of its time, each renewal in its own task;
        a lease whose renewal has not come back by its local expiry is given up here
        (the database may be unreachable: its turn could not commit anyway)."""
        seconds = self.options.lease_seconds
        async with trio.open_nursery() as nursery:
            while True:
                await trio.sleep(seconds / 3)
                now = trio.current_time()
                for session_id, lease in tuple(self._leases.items()):
                    if now >= self._expires.get(session_id, now):
                        self._lapsed(session_id)
                    elif session_id not in self._renewing:
                        self._renewing.add(session_id)
                        nursery.start_soon(self._renew, lease)

    async def _renew(self, lease: Lease) -> None:
        session_id = lease.session_id
        seconds = self.options.lease_seconds
        try:
            asked = trio.current_time()
            # A renewal stuck on a silent connection is cancelled (and its socket shut
            # down) when the lease lapses by this Host's clock.
            with trio.move_on_after(self._expires.get(session_id, asked) - asked):
                try:
                    kept = await self._store.renew_lease(lease, seconds)
                except StoreError as exc:
                    # Unreachable database: fencing keeps it safe; keep trying.
                    logger.warning("cannot renew the lease of session %s: %s", session_id, exc)
                    return
                if self._leases.get(session_id) != lease:
                    return  # given up meanwhile
                if kept:
                    self._expires[session_id] = asked + seconds
                else:
                    logger.warning(
                        "the lease of session %s moved to another Host: its work stops here",
                        session_id,
                    )
                    self._lost(session_id)
                return
            if self._leases.get(session_id) == lease:
                self._lapsed(session_id)
        finally:
            self._renewing.discard(session_id)

    def _lapsed(self, session_id: str) -> None:
        logger.warning(
            "the lease of session %s lapsed before a renewal reached the database:"
            " its work stops here",
            session_id,
        )
        self._lost(session_id)

    def _lost(self, session_id: str) -> None:
        self._expires.pop(session_id, None)
        if self._leases.pop(session_id, None) is None:
            return
        state = self._registry.find(session_id)
        if state is not None and state.cancellation is not None:
            state.cancellation.cancel()  # its commit would fail anyway: stop early

    async def _moved(self, session_id: str, sequence: int) -> None:
        try:
            await self._follow_up(session_id, sequence)
        except StoreError as exc:
            # The database is unreachable for a moment: the next catch-up retries.
            logger.warning("cannot follow session %s: %s", session_id, exc)

    async def _follow_up(self, session_id: str, sequence: int) -> None:
        if self._registry.closed:
            return
        state = self._registry.find(session_id)
        if state is None:
            await self._load(session_id)
            return
        if sequence <= state.revision:
            return
        async with state.lock:
            await self._apply(state)

    async def _load(self, session_id: str) -> None:
        """A session another Host created: rebuild it like recovery and follow it."""
        if session_id in self._loading:
            return
        self._loading.add(session_id)
        try:
            config = await self._session_config(session_id)
            if config is None or session_id in self._registry:
                return
            state = self._registry.new(session_id, config, created_at=time.time())
            await self._apply(state)
            self._registry.adopt(state)
        finally:
            self._loading.discard(session_id)

    # -- applying events --------------------------------------------------------------------
    async def _apply(self, state: _SessionState, *, until: int | None = None) -> None:
        """Apply the session's events after its revision (through ``until``) with the
        reducer every path uses, then hand the rows they published to this Host's
        watchers."""
        first = state.revision
        while until is None or state.revision < until:
            read = await self._store.events_after(state.session_id, state.revision, limit=500)
            events = [e for e in read if until is None or e.sequence <= until]
            if not events:
                break
            state.absorb(events)
        if state.revision == first:
            return
        await self._publish_rows(state)
        state.wake.set()

    async def _publish_rows(self, state: _SessionState) -> None:
        """Rows of the events just applied, read from the tables, to the watchers."""
        if not state.subscribers:
            # Only rows of events applied here: a row past the revision is published
            # when its event is applied (a watcher's catch-up reads up to the revision).
            newest = await self._store.last_position(state.session_id, through=state.revision)
            state.last_row = None if newest is None else wire_position(newest)
            return
        cursor = None if state.last_row is None else store_position(state.last_row)
        while True:
            # Wire rows built straight from the page's values (no StoredRow in between).
            _, built, more = await self._store.history_page_as(
                state.session_id, page_row, through=state.revision, after=cursor, limit=500
            )
            if built:
                rows = tuple(built)
                state.publish_rows(rows)
            if not more:
                break
            cursor = store_position(rows[-1].position)
