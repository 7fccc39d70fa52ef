"""Identifier-like strings of the wire: opaque, bounded, URL- and log-safe."""

from __future__ import annotations

from typing import NewType

from emelex.contracts._limits import MAX_ID_CHARS, MAX_NAME_CHARS
from emelex.contracts._wire import wire_string

_ID = rf"^[A-Za-z0-9][A-Za-z0-9._:-]{{0,{MAX_ID_CHARS - 1}}}$"

SessionId = NewType("SessionId", str)
wire_string(
    SessionId, "SessionId", pattern=_ID, max_len=MAX_ID_CHARS, description="A session's identity."
)
InvocationId = NewType("InvocationId", str)
wire_string(
    InvocationId,
    "InvocationId",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description="One admitted unit of work (a send, an Executor task, a worker task).",
)
TurnId = NewType("TurnId", str)
wire_string(
    TurnId,
    "TurnId",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description="A turn of a session's history.",
)
InteractionId = NewType("InteractionId", str)
wire_string(
    InteractionId,
    "InteractionId",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description="A durable interaction.",
)
DiagnosticId = NewType("DiagnosticId", str)
wire_string(
    DiagnosticId,
    "DiagnosticId",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description="A diagnostic record.",
)
OperationRef = NewType("OperationRef", str)
wire_string(
    OperationRef,
    "OperationRef",
    pattern=_ID,
    max_len=MAX_ID_CHARS,
    description=(
        "A caller-chosen reference naming one mutation; retrying with the same reference "
        "returns the original outcome and never applies the mutation twice."
    ),
)
AgentName = NewType("AgentName", str)
wire_string(
    AgentName,
    "AgentName",
    pattern=rf"^[a-z0-9][a-z0-9_-]{{0,{MAX_NAME_CHARS - 1}}}$",
    max_len=MAX_NAME_CHARS,
    description="The name of an agent known to the Host.",
)
Digest = NewType("Digest", str)
wire_string(
    Digest,
    "Digest",
    pattern=r"^sha256:[0-9a-f]{64}$",
    max_len=71,
    description="A SHA-256 digest of exact bytes, as `sha256:` and 64 lowercase hex digits.",
)
