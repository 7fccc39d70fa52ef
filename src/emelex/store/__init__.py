"""Durable history: each session's append-only event log, the history rows its events
publish, and operation receipts (one transaction per turn), in an embedded SQLite file or
(:mod:`emelex.store.postgres`) a PostgreSQL database several Hosts share."""

from emelex._facade import fix_module_names
from emelex.store._decode import MAX_PAGE_ROWS, SessionSummary, StoredSession
from emelex.store._errors import (
    LeaseLost,
    OperationConflict,
    SessionExists,
    SessionNotFound,
    StoreCorrupt,
    StoreError,
)
from emelex.store._lease import Lease
from emelex.store._log import (
    MODEL_COMPLETION,
    TOOL_RESULT,
    TURN_INPUT,
    TURN_SETTLED,
    AppendResult,
    NewEvent,
    OperationRecord,
    Position,
    RowFields,
    RowPage,
    StoredCall,
    StoredEvent,
    StoredRow,
    turn_events,
)
from emelex.store._permissions import directory_looser_than_private, make_private_directory
from emelex.store._protocol import Store
from emelex.store._schema import SCHEMA_VERSION
from emelex.store._search import CandidatePage, CandidateRow
from emelex.store._sqlite import SqliteStore, open_sqlite_store

__all__ = [
    "directory_looser_than_private",
    "make_private_directory",
    "MODEL_COMPLETION",
    "TOOL_RESULT",
    "TURN_INPUT",
    "TURN_SETTLED",
    "MAX_PAGE_ROWS",
    "SCHEMA_VERSION",
    "AppendResult",
    "Lease",
    "LeaseLost",
    "CandidatePage",
    "CandidateRow",
    "NewEvent",
    "OperationConflict",
    "OperationRecord",
    "Position",
    "RowFields",
    "RowPage",
    "SessionExists",
    "SessionNotFound",
    "SessionSummary",
    "SqliteStore",
    "Store",
    "StoreCorrupt",
    "StoreError",
    "StoredCall",
    "StoredEvent",
    "StoredRow",
    "StoredSession",
    "open_sqlite_store",
    "turn_events",
]

fix_module_names(__name__, globals())
