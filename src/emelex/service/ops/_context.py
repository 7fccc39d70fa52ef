"""The context report: the latest main request a session prepared, as the Host saw it.

:class:`RecordingModel` wraps a session's model: every request it is asked for is
summarized (messages grouped by role, tool schemas, estimated tokens) and handed to the
Host before the model starts, and its end (completed, failed, interrupted, with the
provider's reported input tokens when there are any) after. Estimates use
:func:`emelex.model.estimate_tokens`; the provider's figure is kept beside them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import trio

from emelex.contracts import ContextReport, PreparedRequest, RoleGroup, ToolSchema, trusted
from emelex.model import (
    AgentModel,
    Capabilities,
    Completed,
    GenerationEvent,
    GenerationRequest,
    GenerationStream,
    estimate_tokens,
)
from emelex.service._session import HostSession

#: Tokens counted per message for its framing (as the byte estimate does).
MESSAGE_FRAMING = 4

#: Records a request before it runs; returns the key its end is recorded under.
Prepared = Callable[[GenerationRequest], Awaitable[str]]
Settled = Callable[[str, str, int | None], Awaitable[None]]


def summarize(request: GenerationRequest) -> dict[str, Any]:
    """Role groups and tool schemas of ``request`` with estimated tokens (wire form,
    without the identities the Host adds)."""
    groups: dict[str, list[int]] = {}
    for message in request.messages:
        count, tokens = groups.setdefault(message.role, [0, 0])
        calls = "".join(json.dumps(c.arguments) + c.name for c in message.tool_calls)
        text = message.text + (message.reasoning or "") + calls
        groups[message.role] = [count + 1, tokens + estimate_tokens(text) + MESSAGE_FRAMING]
    tools: list[dict[str, Any]] = []
    for tool in request.tools:
        text = tool.name + tool.description + json.dumps(tool.parameters)
        tools.append(
            {
                "name": tool.name,
                "description": tool.description[:4096],
                "parameters": tool.parameters,
                "estimatedTokens": estimate_tokens(text) + MESSAGE_FRAMING,
            }
        )
    total = sum(tokens for _, tokens in groups.values()) + sum(t["estimatedTokens"] for t in tools)
    return {
        "groups": [
            {"role": role, "messages": count, "estimatedTokens": tokens}
            for role, (count, tokens) in groups.items()
        ],
        "tools": tools,
        "estimatedTokens": total,
    }


def prepared_request(
    summary: dict[str, Any],
    *,
    invocation_id: str,
    turn_id: str,
    state: str,
    prepared_sequence: int,
    provider_input_tokens: int | None,
) -> PreparedRequest:
    """The wire value (built without re-checking: the summary is the Host's own)."""
    return trusted(
        PreparedRequest,
        invocation_id=invocation_id,
        turn_id=turn_id,
        state=state,
        prepared_sequence=prepared_sequence,
        groups=tuple(
            trusted(
                RoleGroup,
                role=g["role"],
                messages=g["messages"],
                estimated_tokens=g["estimatedTokens"],
            )
            for g in summary["groups"]
        ),
        tools=tuple(
            trusted(
                ToolSchema,
                name=t["name"],
                description=t["description"],
                parameters=t["parameters"],
                estimated_tokens=t["estimatedTokens"],
            )
            for t in summary["tools"]
        ),
        estimated_tokens=summary["estimatedTokens"],
        provider_input_tokens=provider_input_tokens,
    )


class _Watched:
    """The inner stream, noting the provider's input tokens on completion."""

    def __init__(self, inner: GenerationStream) -> None:
        self._inner = inner
        self.completed = False
        self.input_tokens: int | None = None

    def __aiter__(self) -> _Watched:
        return self

    async def __anext__(self) -> GenerationEvent:
        event = await self._inner.__anext__()
        if isinstance(event, Completed):
            self.completed = True
            usage = event.response.usage
            if not usage.estimated and usage.input_tokens > 0:
                self.input_tokens = usage.input_tokens
        return event


class RecordingModel:
    """An AgentModel that reports each request before it runs and its end after."""

    def __init__(self, inner: AgentModel, prepared: Prepared, settled: Settled) -> None:
        self._inner = inner
        self._prepared = prepared
        self._settled = settled

    @property
    def wrapped(self) -> AgentModel:
        return self._inner

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @asynccontextmanager
    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationStream]:
        key = await self._prepared(request)
        watched: _Watched | None = None
        state = "failed"
        try:
            async with self._inner.generate(request) as stream:
                watched = _Watched(stream)
                yield watched
            state = "completed" if watched.completed else "failed"
        except trio.Cancelled:
            state = "interrupted"
            raise
        finally:
            tokens = None if watched is None else watched.input_tokens
            with trio.CancelScope(shield=True):
                await self._settled(key, state, tokens)


def context_report(session: HostSession, through: int | None) -> ContextReport:
    """The context report of ``session`` under the fence ``through`` (None: now)."""
    state = session
    # Records a running turn has not written yet count as of the sequences they get.
    requests, newest = state.requests_view()
    fence = newest if through is None else min(through, newest)
    chosen = None
    for request in reversed(requests):
        if request.sequence <= fence:
            chosen = request
            break
    report = None
    if chosen is not None:
        settled = chosen.settled_at is not None and chosen.settled_at <= fence
        if settled:
            outcome = chosen.state
        elif chosen.settled_at is not None or state.queue.running is not None:
            outcome = "running"  # as of the fence (it ended later, or runs now)
        else:
            outcome = "interrupted"  # it never ended: the Host stopped meanwhile
        report = prepared_request(
            chosen.payload,
            invocation_id=chosen.payload["invocationId"],
            turn_id=chosen.payload["turnId"],
            state=outcome,
            prepared_sequence=chosen.sequence,
            provider_input_tokens=chosen.tokens if settled else None,
        )
    return ContextReport(session_id=session.session_id, through=fence, request=report)  # type: ignore[arg-type]
