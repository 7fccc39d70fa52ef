"""Where a turn stands, written down so that another process can continue it.

A process that runs turns for a durable host (the service's Host) may be lost at any
moment: killed, out of memory, its machine gone. The turn's :class:`TurnProgress` is
what the driver writes down before anything of the turn leaves the process (an approval
is asked, a tool may start); a host that restarts either settles the turn from it (the
checkpoint rule) or continues it with :meth:`AgentSession.resume`, which picks the turn
up exactly there: calls that already have a result keep it, a call that may have started
keeps its "interrupted" result (never a second run), and the calls that never started
are resolved again under today's tools and policies.

Pure: building, checking and splitting a progress record does no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import attrs

from emelex.agent._errors import InvalidTurnProgress
from emelex.model import Message, Response, TextPart, from_json, to_json
from emelex.tools import ToolOutput

#: The most calls' ids a progress record may name as not started (a batch is bounded
#: far below this by the ceilings; a record from outside is checked against it).
MAX_OPEN_CALLS: Final = 4096


@attrs.frozen
class TurnProgress:
    """A turn as far as it got: ``messages`` is exactly what the turn commits if it is
    settled now (the user's message first, the batch in progress completed with
    synthetic results), ``open_calls`` the calls of that batch that never started (their
    results are placeholders a resumed turn replaces), ``rounds`` the model rounds used,
    ``may_have_run`` whether any tool of the turn may have run (settling then keeps
    the checkpoint instead of rolling back), and ``between_rounds`` whether it was taken
    after a batch ended (no call of the turn is starting or waiting: a host may write it
    with its next record, since losing it costs only the batch's real results, which
    then read as interrupted)."""

    turn_id: str
    messages: tuple[Message, ...]
    open_calls: frozenset[str]
    rounds: int
    may_have_run: bool
    between_rounds: bool = False

    def to_wire(self) -> dict[str, Any]:
        """Plain JSON values (what a host stores)."""
        return {
            "turnId": self.turn_id,
            "messages": [json.loads(to_json(message)) for message in self.messages],
            "openCalls": sorted(self.open_calls),
            "rounds": self.rounds,
            "mayHaveRun": self.may_have_run,
            "betweenRounds": self.between_rounds,
        }

    @classmethod
    def from_wire(cls, payload: Mapping[str, Any]) -> TurnProgress:
        """Read a stored record. Raises :class:`InvalidTurnProgress`. A record written
        before progress had its own fields (only ``messages``) reads as a checkpoint with
        nothing left open, taken after a tool may have run."""
        try:
            messages = tuple(from_json(json.dumps(body), Message) for body in payload["messages"])
            open_calls = payload.get("openCalls", [])
            rounds = payload.get("rounds", 1)
            may_have_run = payload.get("mayHaveRun", True)
            turn_id = payload.get("turnId", "")
            between_rounds = payload.get("betweenRounds", False)
        except Exception as exc:  # any malformed shape: a typed error, never a crash
            raise InvalidTurnProgress(f"unreadable turn progress ({type(exc).__name__})") from exc
        if (
            not isinstance(open_calls, list)
            or len(open_calls) > MAX_OPEN_CALLS
            or not all(isinstance(call, str) for call in open_calls)
            or type(rounds) is not int
            or rounds < 0
            or type(may_have_run) is not bool
            or type(between_rounds) is not bool
            or not isinstance(turn_id, str)
        ):
            raise InvalidTurnProgress("turn progress with fields of the wrong type")
        return cls(
            str(turn_id), messages, frozenset(open_calls), rounds, may_have_run, between_rounds
        )


#: Awaited with a turn's progress before an approval is asked and before each tool may
#: start (durable when it returns), and after each batch (``between_rounds``: durable at
#: the host's convenience); see ``AgentSessionBuilder.progress_journal``.
ProgressJournal = Callable[[TurnProgress], Awaitable[None]]


@attrs.frozen
class ResumePoint:
    """A progress record split for the turn core: the messages after the user's that
    are done, and the batch in progress (its response and the results it keeps), if a
    call of it never started."""

    user: Message
    done: tuple[Message, ...]
    batch: tuple[Response, dict[str, ToolOutput]] | None


def resume_point(progress: TurnProgress) -> ResumePoint:
    """Split ``progress`` (raises :class:`InvalidTurnProgress` when it is not a turn)."""
    messages = progress.messages
    if not messages or messages[0].role != "user":
        raise InvalidTurnProgress("a turn's progress starts with the user's message")
    if not progress.open_calls:
        return ResumePoint(messages[0], messages[1:], None)
    start = _last_batch(messages)
    assistant = messages[start]
    calls = {call.id for call in assistant.tool_calls}
    if not progress.open_calls <= calls:
        raise InvalidTurnProgress("turn progress names calls its last batch does not make")
    answered = [message.tool_call_id for message in messages[start + 1 :]]
    if (
        any(message.role != "tool" for message in messages[start + 1 :])
        or len(answered) != len(calls)
        or set(answered) != calls
    ):
        raise InvalidTurnProgress("turn progress with a batch that is not one result per call")
    results = {
        str(message.tool_call_id): ToolOutput(message.content)
        for message in messages[start + 1 :]
        if message.tool_call_id not in progress.open_calls
    }
    response = Response(
        _text_of(assistant), reasoning=assistant.reasoning, tool_calls=assistant.tool_calls
    )
    return ResumePoint(messages[0], messages[1:start], (response, results))


def _last_batch(messages: Sequence[Message]) -> int:
    for index in range(len(messages) - 1, 0, -1):
        if messages[index].role == "assistant":
            if not messages[index].tool_calls:
                break
            return index
    raise InvalidTurnProgress("turn progress names open calls but holds no batch")


def _text_of(message: Message) -> str:
    if not all(isinstance(part, TextPart) for part in message.content):
        raise InvalidTurnProgress("an assistant message of turn progress holds non-text parts")
    return "".join(part.text for part in message.content if isinstance(part, TextPart))
