"""Executor: one task on an agent, with immutable input files as one binary resource."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._errors import ContractLimitExceeded
from emelex.contracts._ids import AgentName, Digest, InvocationId, OperationRef, SessionId
from emelex.contracts._limits import (
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
)
from emelex.contracts._operations import OperationReceipt
from emelex.contracts._wire import count, items, text, wire

# A file name, not a path: no separators, no control characters, not "." or "..".
_FILE_NAME = r"^(?!\.\.?$)[^/\\\x00-\x1f\x7f]+$"
# type/subtype as RFC 6838 restricts them, without parameters.
_MIME = r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"


@wire
class AttachmentMeta:
    """One file of the ``attachments`` resource: its bytes follow those of the files before.

    Metadata alone grants no access: the Host reads the resource it received and checks
    each file's size and digest against this.
    """

    name: str = text(min_len=1, max_len=MAX_NAME_CHARS, pattern=_FILE_NAME)
    mime_type: str = text(min_len=3, max_len=255, pattern=_MIME)
    bytes: int = count(maximum=MAX_ATTACHMENT_BYTES, limit="attachment bytes")
    digest: Digest


@wire
class ExecuteRequest:
    """Run ``text`` as one task on ``agent``; ``attachments`` describes the resource, in order."""

    agent: AgentName
    text: str = text(min_len=1, max_len=MAX_TEXT_CHARS, limit="task text")
    attachments: tuple[AttachmentMeta, ...] = items(max_items=MAX_ATTACHMENTS, limit="attachments")
    operation: OperationRef

    def __attrs_post_init__(self) -> None:
        total = sum(meta.bytes for meta in self.attachments)
        if total > MAX_ATTACHMENT_BYTES:
            raise ContractLimitExceeded("attachment bytes", MAX_ATTACHMENT_BYTES, total)


def attachment_spans(attachments: tuple[AttachmentMeta, ...]) -> tuple[tuple[int, int], ...]:
    """Each file's ``[start, end)`` byte range in the resource, from the preceding lengths."""
    spans = []
    offset = 0
    for meta in attachments:
        spans.append((offset, offset + meta.bytes))
        offset += meta.bytes
    return tuple(spans)


ExecuteStatus = Literal["completed", "failed", "stopped"]


@wire
class ExecuteReceipt:
    """The task's invocation, the session that runs it and the operation receipt."""

    invocation_id: InvocationId
    session_id: SessionId
    receipt: OperationReceipt


@wire
class ExecuteResult:
    """How the task ended; ``answer`` is the final assistant text when it completed."""

    invocation_id: InvocationId
    session_id: SessionId
    status: ExecuteStatus
    answer: str | None = text(max_len=MAX_TEXT_CHARS)
