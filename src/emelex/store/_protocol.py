"""The contract every session store keeps: what the Host and the command line use.

:class:`SqliteStore` (one file, one machine) and :class:`PostgresStore` (one database,
several Hosts) both satisfy it; ``tests/store/test_store_contract.py`` runs one suite
against both.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from emelex.model import Message
from emelex.store._decode import SessionSummary, StoredSession
from emelex.store._log import (
    AppendResult,
    NewEvent,
    OperationRecord,
    Outcome,
    Position,
    RowPage,
    StoredEvent,
    StoredRow,
)
from emelex.store._search import CandidatePage

R = TypeVar("R")


class Store(Protocol):
    """Durable sessions: each one's append-only event log, the history rows its events
    publish, and operation receipts. Every write is one transaction (a turn is whole or
    absent); pages are keyset-paged under a fence; every method is async."""

    async def create_session(
        self,
        session_id: str,
        authority_json: str,
        config: dict[str, Any] | None = None,
        *,
        events: Sequence[NewEvent] = (),
        operation: OperationRecord | None = None,
    ) -> AppendResult: ...

    async def find_operation(self, session_id: str, reference: str, digest: str) -> str | None: ...

    async def operation_receipt(self, session_id: str, reference: str) -> str | None: ...

    async def append_turn(
        self,
        session_id: str,
        turn_id: str,
        messages: Sequence[Message],
        *,
        outcome: Outcome = "committed",
        operation: OperationRecord | None = None,
    ) -> AppendResult: ...

    async def append_events(
        self,
        session_id: str,
        events: Sequence[NewEvent],
        *,
        operation: OperationRecord | None = None,
    ) -> AppendResult: ...

    async def append_patch(
        self,
        session_id: str,
        patch_id: str,
        info_json: str,
        data: bytes,
        events: Sequence[NewEvent],
        *,
        operation: OperationRecord,
    ) -> AppendResult: ...

    async def read_patch(
        self, session_id: str, patch_id: str, offset: int, limit: int
    ) -> tuple[str, int, bytes] | None: ...

    async def history_page_as(
        self,
        session_id: str,
        build: Callable[..., R],
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
        include_internal: bool = False,
    ) -> tuple[int, list[R], bool]: ...

    async def search_candidates(
        self,
        session_id: str,
        query: str,
        *,
        case_sensitive: bool,
        through: int | None = None,
        after: Position | None = None,
    ) -> CandidatePage: ...

    async def search_candidates_as(
        self,
        session_id: str,
        query: str,
        decide: Callable[[CandidatePage], R],
        *,
        case_sensitive: bool,
        through: int | None = None,
        after: Position | None = None,
        spans: bool = False,
    ) -> R: ...

    async def last_sequence(self, session_id: str) -> int: ...

    async def last_position(
        self, session_id: str, *, through: int | None = None
    ) -> Position | None: ...

    async def history_page(
        self,
        session_id: str,
        *,
        through: int | None = None,
        after: Position | None = None,
        limit: int = 100,
        include_internal: bool = False,
    ) -> RowPage: ...

    async def read_row(
        self, session_id: str, position: Position, *, through: int | None = None
    ) -> StoredRow | None: ...

    async def events_after(
        self, session_id: str, after: int, *, limit: int = 100
    ) -> tuple[StoredEvent, ...]: ...

    async def load_config(self, session_id: str) -> dict[str, Any]: ...

    async def load_session(self, session_id: str) -> StoredSession: ...

    async def list_sessions(self) -> list[SessionSummary]: ...

    async def delete_session(self, session_id: str) -> None: ...

    async def export_session(self, session_id: str) -> dict[str, Any]: ...
