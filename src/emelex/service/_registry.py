"""The sessions a Host knows, and the narrow capabilities its operations get.

:class:`SessionRegistry` is the one place sessions are made and adopted: a new session
starts from its stored configuration and first events (applied by the reducer like any
others), and adopting it starts its runner, unless this Host knew it already (another
Host's session can reach a follower first). :class:`Services` is what an operation module
receives instead of the Host: the registry, the store, the agents, and a few functions.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from emelex.app import Agent
from emelex.app import Session as AppSession
from emelex.contracts import (
    to_wire,
)
from emelex.service._api import HostAPI
from emelex.service._errors import HostClosed, OperationConflict, UnknownSession
from emelex.service._reducer import SessionLog, apply
from emelex.service._session import Appender, HostSession
from emelex.store import NewEvent, OperationRecord, Store
from emelex.store import OperationConflict as StoreOperationConflict


class SessionRegistry:
    """Every session of this Host by id (see the module docs)."""

    def __init__(
        self,
        *,
        capacity: int,
        appender: Appender,
        start_runner: Callable[[HostSession], None],
        is_closed: Callable[[], bool],
    ) -> None:
        self._sessions: dict[str, HostSession] = {}
        self._capacity = capacity
        self._appender = appender
        self._start_runner = start_runner
        self._is_closed = is_closed

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def __iter__(self) -> Iterator[HostSession]:
        return iter(tuple(self._sessions.values()))

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str) -> HostSession:
        """The session, or :class:`UnknownSession`."""
        try:
            return self._sessions[session_id]
        except KeyError:
            raise UnknownSession(f"the Host has no session {session_id!r}") from None

    def items(self) -> list[tuple[str, HostSession]]:
        """Every session with its id, in id order."""
        return sorted(self._sessions.items())

    def find(self, session_id: str) -> HostSession | None:
        return self._sessions.get(session_id)

    @property
    def closed(self) -> bool:
        return self._is_closed()

    def is_closed(self) -> bool:
        """Whether the Host has begun closing (a call: the answer changes over time)."""
        return self._is_closed()

    def check_open(self) -> None:
        if self._is_closed():
            raise HostClosed("the Host is closed")

    def new(
        self,
        session_id: str,
        config: Mapping[str, Any],
        *,
        created_at: float,
        events: Sequence[NewEvent] = (),
    ) -> HostSession:
        """A session of ``config`` whose first stored events are ``events`` (sequences
        1, 2, ...), applied like every other event. Not adopted yet."""
        log = SessionLog.from_config(
            session_id, config, created_at=created_at, capacity=self._capacity
        )
        for sequence, event in enumerate(events, start=1):
            apply(log, sequence, event.kind, event.turn_id, event.payload)
        return HostSession(log, self._appender)

    def adopt(self, session: HostSession) -> HostSession:
        """Add a new session and start its runner, unless one of that id is known
        already: returns the one kept."""
        known = self._sessions.get(session.session_id)
        if known is not None:
            return known
        self._sessions[session.session_id] = session
        self._start_runner(session)
        return session

    def sharing(self, workspace: str) -> list[HostSession]:
        """Every session whose turns may write ``workspace``."""
        return [s for s in self._sessions.values() if s.workspace == workspace]


async def find_receipt(store: Store, session_id: str, operation: str, digest: str) -> Any:
    """The receipt (wire form) an operation reference already has, or None; the same
    reference with another request raises :class:`OperationConflict`."""
    try:
        original = await store.find_operation(session_id, operation, digest)
    except StoreOperationConflict as exc:
        raise OperationConflict(
            f"operation {operation!r} was already used for a different request"
        ) from exc
    return None if original is None else json.loads(original)


@attrs.frozen(eq=False)
class Services:
    """What an operation module needs of its Host, and nothing more."""

    registry: SessionRegistry
    store: Store
    agents: Mapping[str, Agent]
    root: pathlib.Path
    max_attachment_bytes: int
    #: The public operations (forks and workers are built from sends and forks).
    operations: HostAPI
    #: The running engine session of a Host session (``stored=False``: not stored yet).
    app_session: Callable[[HostSession, bool], Awaitable[AppSession]]
    #: Paths that are the Host's own state, never part of a workspace's work.
    private_dirs: tuple[str, ...]

    async def find_receipt(self, session: HostSession, operation: str, digest: str) -> Any:
        return await find_receipt(self.store, session.session_id, operation, digest)

    async def enabled_tools(self, session: HostSession) -> tuple[str, ...]:
        if session.tools is not None:
            return session.tools
        app = await self.app_session(session, True)
        return app.agent_session.enabled_tools

    async def create(
        self,
        session_id: str,
        config: dict[str, Any],
        events: Sequence[NewEvent],
        operation: str,
        digest: str,
        receipt: Any,
    ) -> None:
        """Store a new session with its first events and the receipt of the operation
        that made it, in one transaction (raises ``SessionExists`` when it is there)."""
        await self.store.create_session(
            session_id,
            "{}",
            config,
            events=events,
            operation=OperationRecord(operation, digest, json.dumps(to_wire(receipt))),
        )
