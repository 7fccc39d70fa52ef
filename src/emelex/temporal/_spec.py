"""The values a turn workflow and its activities exchange, and their JSON forms.

Temporal stores every workflow input, activity input and result in the workflow's
history, so each crossing is plain JSON: model values travel in emelex's versioned wire
form (:func:`emelex.model.unstructure`), the rest as attrs values through one strict
cattrs converter. Nothing here does I/O: the workflow imports it.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal, TypeVar

import attrs
import cattrs

from emelex._errors import SerializationError
from emelex.agent import AgentTurn
from emelex.model import (
    GenerationOptions,
    GenerationRequest,
    Message,
    Part,
    Response,
    ToolCall,
    Usage,
)
from emelex.model import structure as structure_model
from emelex.model import unstructure as unstructure_model
from emelex.tools import ToolOutput

#: What a turn does with a call that needs approval: deny it at once (the default, as
#: in process) or wait for an answer through the ``respond`` Update.
ApprovalMode = Literal["deny", "ask"]

TurnStatus = Literal["committed", "failed", "cancelled"]


@attrs.frozen
class Timeouts:
    """How long activities may take, in seconds. A worker lost mid-activity is noticed
    after ``heartbeat`` seconds without a heartbeat (activities heartbeat every
    ``heartbeat / 4``)."""

    model: float = 600.0
    tool: float = 3_600.0
    heartbeat: float = 10.0
    #: Attempts of a model round that fails on its transport (a tool never retries
    #: unless it declares itself idempotent).
    model_attempts: int = 5
    idempotent_tool_attempts: int = 3


@attrs.frozen
class AgentDescription:
    """What a worker's agent is: pinned by a session's first turn, carried by every later
    one. ``authority`` is the worker's authority snapshot (JSON); the rest is how its
    turns run. Messages and options are in their wire form."""

    authority: str
    history: Any
    options: Any
    #: Tool names in declaration order (the snapshot sorts them; the model sees this order).
    tool_order: tuple[str, ...]
    enabled: tuple[str, ...]
    tool_retries: tuple[tuple[str, int], ...]
    idempotent: tuple[str, ...]
    max_rounds: int
    max_retries: int
    strip_reasoning: bool

    @property
    def digest(self) -> str:
        return authority_digest(self.authority)


@attrs.frozen
class TurnInput:
    """A turn workflow's input. ``agent`` is None on a session's first turn: the
    workflow then asks a worker for its description (an activity) and pins it.
    ``history`` is the session's committed history after the agent's own prefix."""

    session_id: str
    turn_id: str
    user_message: Any
    history: Any
    agent: AgentDescription | None = None
    options: Any = None
    approvals: ApprovalMode = "deny"
    approval_timeout: float | None = None
    max_turn_tokens: int | None = None
    timeouts: Timeouts = attrs.field(factory=Timeouts)


@attrs.frozen
class TurnResult:
    """A turn workflow's result: the committed turn, or how it failed and what its
    history kept (``messages``: nothing when rolled back, else the checkpoint)."""

    status: TurnStatus
    agent: AgentDescription
    turn: Any = None
    error_type: str = ""
    message: str = ""
    rolled_back: bool = True
    messages: Any = ()


@attrs.frozen
class ModelRoundInput:
    session_id: str
    turn_id: str
    round: int
    digest: str
    request: Any


@attrs.frozen
class CallVerdict:
    """What a worker's tool says about one proposed call before it may run:
    ``kind`` is "run" (no approval needed), "ask" (``reason`` names the action),
    "feedback" or "error" (``reason`` is the result text; the call never runs)."""

    kind: Literal["run", "ask", "feedback", "error"]
    reason: str = ""


@attrs.frozen
class ModelRoundResult:
    """A finished model round: the streamed answer and reasoning (the turn core checks
    them against the response, as in process) and one verdict per proposed call."""

    answer: str
    reasoning: str
    response: Any
    verdicts: tuple[CallVerdict, ...] = ()


@attrs.frozen
class ToolCallInput:
    session_id: str
    turn_id: str
    digest: str
    call: Any
    approved: bool


@attrs.frozen
class PendingApproval:
    """A call waiting for an answer: the exact call, its tool's sentence, and when the
    workflow started waiting (workflow time, ISO 8601)."""

    call_id: str
    tool: str
    arguments: Any
    reason: str
    since: str


@attrs.frozen
class ApprovalAnswer:
    """The ``respond`` Update's argument: approve, or deny with a reason."""

    call_id: str
    approve: bool
    reason: str = ""


T = TypeVar("T")

_converter = cattrs.Converter(forbid_extra_keys=True)


def to_data(value: Any) -> Any:
    """Plain JSON data for one of this module's values."""
    return _converter.unstructure(value)


def from_data(data: Any, cls: type[T]) -> T:
    """Decode ``data`` made by :func:`to_data`; SerializationError when malformed."""
    try:
        return _converter.structure(data, cls)
    except Exception as exc:
        raise SerializationError(f"malformed {cls.__name__}: {exc}") from exc


def authority_digest(authority: str) -> str:
    """The drift check compares digests: equal exactly when the snapshots are equal."""
    return hashlib.sha256(authority.encode()).hexdigest()


# -- model values ---------------------------------------------------------------------------
def encode_messages(messages: tuple[Message, ...]) -> Any:
    return unstructure_model(messages, tuple[Message, ...])


def decode_messages(data: Any) -> tuple[Message, ...]:
    return structure_model(data, tuple[Message, ...])


def encode_message(message: Message) -> Any:
    return unstructure_model(message)


def decode_message(data: Any) -> Message:
    return structure_model(data, Message)


def encode_options(options: GenerationOptions) -> Any:
    return unstructure_model(options)


def decode_options(data: Any) -> GenerationOptions:
    return structure_model(data, GenerationOptions)


def encode_request(request: GenerationRequest) -> Any:
    return unstructure_model(request)


def decode_request(data: Any) -> GenerationRequest:
    return structure_model(data, GenerationRequest)


def encode_response(response: Response) -> Any:
    return unstructure_model(response)


def decode_response(data: Any) -> Response:
    return structure_model(data, Response)


def encode_call(call: ToolCall) -> Any:
    return unstructure_model(call)


def decode_call(data: Any) -> ToolCall:
    return structure_model(data, ToolCall)


def encode_output(output: ToolOutput) -> Any:
    return {
        "content": unstructure_model(output.content, tuple[Part, ...]),
        "is_error": output.is_error,
        "retry": output.retry,
    }


def decode_output(data: Any) -> ToolOutput:
    try:
        content = structure_model(data["content"], tuple[Part, ...])
        return ToolOutput(content, bool(data["is_error"]), retry=bool(data["retry"]))
    except (KeyError, TypeError) as exc:
        raise SerializationError(f"malformed tool output: {exc!r}") from exc


def encode_turn(turn: AgentTurn) -> Any:
    return {
        "turn_id": turn.turn_id,
        "response": unstructure_model(turn.response),
        "messages": encode_messages(turn.messages),
        "usage": unstructure_model(turn.usage),
        "rounds": turn.rounds,
    }


def decode_turn(data: Any) -> AgentTurn:
    try:
        return AgentTurn(
            turn_id=str(data["turn_id"]),
            response=structure_model(data["response"], Response),
            messages=decode_messages(data["messages"]),
            usage=structure_model(data["usage"], Usage),
            rounds=int(data["rounds"]),
        )
    except (KeyError, TypeError) as exc:
        raise SerializationError(f"malformed turn: {exc!r}") from exc
