"""Errors of the session store (all :class:`StoreError`, under ``EmelexError``)."""

from __future__ import annotations

from emelex._errors import EmelexError


class StoreError(EmelexError):
    """The store failed or was asked for something it does not hold."""


class SessionNotFound(StoreError):
    """No stored session has that id."""


class SessionExists(StoreError):
    """A session with that id is already stored."""


class StoreCorrupt(StoreError):
    """What the store holds cannot be decoded: the file is not a (sound) SQLite database,
    or a row holds a value of the wrong type or malformed JSON (a damaged or hand-edited
    store). ``path`` is the store file, ``session_id`` the session the bad value belongs
    to and ``field`` the column or message it came from (each ``None`` when the damage is
    not tied to one)."""

    def __init__(
        self,
        detail: str,
        *,
        path: str,
        session_id: str | None = None,
        field: str | None = None,
    ) -> None:
        where = "".join(
            [
                f", session {session_id}" if session_id is not None else "",
                f", field {field}" if field is not None else "",
            ]
        )
        super().__init__(f"store {path} is corrupt{where}: {detail}")
        self.path = path
        self.session_id = session_id
        self.field = field


class OperationConflict(StoreError):
    """An operation reference was used again for a different request: a retry must
    repeat the original request exactly (its receipt is then returned)."""

    def __init__(self, session_id: str, reference: str) -> None:
        super().__init__(
            f"operation {reference!r} of session {session_id} was already used"
            " for a different request"
        )
        self.session_id = session_id
        self.reference = reference


class LeaseLost(StoreError):
    """A write made for a session's lease holder found another holder's token: the
    session moved to another Host, and nothing of the write was committed."""

    def __init__(self, session_id: str, token: int) -> None:
        super().__init__(f"the lease on session {session_id} (token {token}) was lost")
        self.session_id = session_id
        self.token = token
