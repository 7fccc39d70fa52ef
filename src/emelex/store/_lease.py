"""A session's lease, as a value: which Host may run its work, fenced by a token."""

from __future__ import annotations

import attrs


@attrs.frozen
class Lease:
    """The right of ``holder`` to run a session's work until another Host takes it;
    ``token`` grows with every change of holder, and every write made under the lease
    commits only while it is still the session's token."""

    session_id: str
    holder: str
    token: int
