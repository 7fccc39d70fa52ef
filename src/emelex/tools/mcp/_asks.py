"""Servers that ask back: elicitation (a server asks the user for input) and sampling
(a server asks the client's model to generate).

A server configuration opts in by naming a handler (``McpServer(elicitation=...,
sampling=...)``); without one the client declines as before and the server gets an
error. A handler is awaited in the connection actor's tree, bounded by
``ask_timeout``, and cancelled when the tool call it serves is cancelled or the
connection closes: the server then gets ``cancel`` (elicitation) or an error
(sampling), and nothing keeps waiting for a person who is no longer asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, TypeAlias, runtime_checkable

import attrs
import trio

from emelex.tools._definition import ArgumentValidator


@attrs.frozen
class ElicitationRequest:
    """A server's question: ``message`` for a person and the ``schema`` (a flat JSON
    Schema object) the answer's ``content`` must satisfy."""

    server: str
    message: str
    schema: Mapping[str, Any]


def _copy(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value)


@attrs.frozen
class ElicitAccept:
    """Answer with ``content`` (checked against the request's schema before it is
    sent; an answer that does not fit is sent as ``cancel``)."""

    content: Mapping[str, Any] = attrs.field(factory=dict, converter=_copy)


@attrs.frozen
class ElicitDecline:
    """The person said no."""


@attrs.frozen
class ElicitCancel:
    """The person dismissed the question without answering."""


ElicitationAnswer: TypeAlias = ElicitAccept | ElicitDecline | ElicitCancel


@runtime_checkable
class ElicitationHandler(Protocol):
    """Answers a server's question (in-process, the approval policy's sibling: it may
    wait for a person; it is cancelled when the call it serves is)."""

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer: ...


@attrs.frozen
class SamplingMessage:
    role: Literal["user", "assistant"]
    text: str


@attrs.frozen
class SamplingRequest:
    """A server's request to generate: its messages (text parts only), its system
    prompt, and the most tokens it asked for."""

    server: str
    messages: tuple[SamplingMessage, ...]
    system_prompt: str | None
    max_tokens: int
    temperature: float | None = None
    stop: tuple[str, ...] = ()


@attrs.frozen
class SamplingResult:
    text: str
    model: str
    stop_reason: str = "endTurn"


@runtime_checkable
class SamplingHandler(Protocol):
    """Generates for a server on a model the application chose, or raises
    :class:`~emelex.tools.mcp.McpAskRefused`."""

    async def sample(self, request: SamplingRequest) -> SamplingResult: ...


def checked_answer(request: ElicitationRequest, answer: object) -> ElicitationAnswer:
    """``answer`` as it may be sent: an accepted content that breaks the schema, or a
    value that is no answer at all, becomes ``ElicitCancel`` (the server is never sent
    data it did not ask for)."""
    if isinstance(answer, ElicitAccept):
        try:
            problem = ArgumentValidator(dict(request.schema)).problem(answer.content)
        except Exception:
            problem = "the server's schema cannot be checked"
        return ElicitCancel() if problem is not None else answer
    if isinstance(answer, ElicitDecline | ElicitCancel):
        return answer
    return ElicitCancel()


class AskScopes:
    """The cancel scopes of the handlers now running for one connection."""

    __slots__ = ("_scopes",)

    def __init__(self) -> None:
        self._scopes: set[trio.CancelScope] = set()

    def open(self, seconds: float) -> trio.CancelScope:
        scope = trio.CancelScope(deadline=trio.current_time() + seconds)
        self._scopes.add(scope)
        return scope

    def close(self, scope: trio.CancelScope) -> None:
        self._scopes.discard(scope)

    def cancel_all(self) -> None:
        """A call was cancelled: its question (we cannot tell which one is its) must not
        outlive it, so every pending one is answered ``cancel``; a server still
        interested asks again."""
        for scope in tuple(self._scopes):
            scope.cancel()

    def __len__(self) -> int:
        return len(self._scopes)


__all__ = [
    "AskScopes",
    "ElicitAccept",
    "ElicitCancel",
    "ElicitDecline",
    "ElicitationAnswer",
    "ElicitationHandler",
    "ElicitationRequest",
    "SamplingHandler",
    "SamplingMessage",
    "SamplingRequest",
    "SamplingResult",
    "checked_answer",
]
