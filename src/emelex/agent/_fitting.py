"""Fitting a request's messages under a limit without touching committed history.

One pure algorithm serves every limit: the harness's resource ceilings (a
:class:`~emelex.agent.RequestSize` per message) and the app's context budget (estimated
tokens per message). The caller supplies each message's cost, the total, and a test of
whether a total fits; this module decides what to leave out, in three deterministic
stages, stopping as soon as the total fits:

1. shorten older tool results, oldest first (only when the caller gives ``shorten``;
   the latest round's results are never touched);
2. drop whole earlier turns, oldest first (a user message with everything up to the
   next user message);
3. drop earlier rounds of the current turn, oldest first (an assistant message with
   all of its tool results).

System messages, the current user message and the latest round (the last assistant
message with tool calls and its results) are always kept, and a tool call is never
separated from its result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

import attrs

from emelex.model import Message


class _Cost(Protocol):
    def __add__(self: _C, other: _C, /) -> _C: ...
    def __sub__(self: _C, other: _C, /) -> _C: ...


_C = TypeVar("_C", bound=_Cost)

#: ``shorten(message, cost)``: a shorter stand-in for an older tool result and its cost,
#: or None when shortening gains nothing.
Shorten = Callable[[Message, _C], "tuple[Message, _C] | None"]


@attrs.frozen
class Fitted(Generic[_C]):
    """The outcome of :func:`fit_rounds`: the messages (the same tuple when nothing had
    to go), their total cost, and whether that total fits."""

    messages: tuple[Message, ...]
    total: _C
    fits: bool


def latest_round(messages: Sequence[Message]) -> int:
    """Index where the latest round (last assistant tool calls + results) starts, or
    ``len(messages)`` when the messages do not end with one."""
    end = len(messages)
    while end > 0 and messages[end - 1].role == "tool":
        end -= 1
    if end > 0 and messages[end - 1].role == "assistant" and messages[end - 1].tool_calls:
        return end - 1
    return end


def _units(messages: Sequence[Message], indices: Sequence[int]) -> list[list[int]]:
    """Split ``indices`` into droppable units: a user message with what follows it up
    to the next user message, or (where no user message leads) an assistant message with
    its tool results. Tool results always stay in the unit of their call."""
    units: list[list[int]] = []
    for index in indices:
        role = messages[index].role
        opened_by_user = bool(units) and messages[units[-1][0]].role == "user"
        if not units or role == "user" or (role == "assistant" and not opened_by_user):
            units.append([index])
        else:
            units[-1].append(index)
    return units


def fit_rounds(
    messages: Sequence[Message],
    costs: Sequence[_C],
    total: _C,
    fits: Callable[[_C], bool],
    shorten: Shorten[_C] | None = None,
) -> Fitted[_C]:
    """Leave out what the module docs describe until ``fits(total)``.

    ``costs[i]`` is the cost of ``messages[i]`` and ``total`` the cost of the whole
    request (messages plus whatever fixed part, such as tool declarations, the caller
    counts). Pure and deterministic; never raises for a request that cannot fit (the
    result says ``fits=False`` and the caller raises its own typed error).
    """
    original = tuple(messages)
    if fits(total):
        return Fitted(original, total, True)
    working: list[Message | None] = list(original)
    spent = list(costs)

    def result(fitted: bool) -> Fitted[_C]:
        return Fitted(tuple(m for m in working if m is not None), total, fitted)

    latest = latest_round(original)
    users = [i for i in range(latest) if original[i].role == "user"]
    current = users[-1] if users else None
    if shorten is not None:
        for index in range(latest):
            if original[index].role != "tool":
                continue
            shorter = shorten(original[index], costs[index])
            if shorter is None:
                continue
            message, cost = shorter
            total = total - spent[index] + cost
            spent[index] = cost
            working[index] = message
            if fits(total):
                return result(True)
    start = 0 if current is None else current + 1
    earlier = [] if current is None else range(current)
    rounds = range(start, latest)
    units = [
        *_units(original, [i for i in earlier if original[i].role != "system"]),
        *_units(original, [i for i in rounds if original[i].role != "system"]),
    ]
    for unit in units:
        for index in unit:
            total = total - spent[index]
            working[index] = None
        if fits(total):
            return result(True)
    return result(False)
