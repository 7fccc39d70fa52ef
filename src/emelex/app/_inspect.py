"""Inspecting the next model call through the harness's own request assembly."""

from __future__ import annotations

import attrs

from emelex._ids import new_id
from emelex.agent import AgentSession, TurnCore
from emelex.model import GenerationOptions, GenerationRequest, Message, TextPart, ToolDefinition


@attrs.frozen
class SessionContext:
    """The effective context of the next model call: exactly the messages, tool
    declarations and options the session's turn would send."""

    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...]
    options: GenerationOptions
    #: Non-fatal problems integrations reported (e.g. plugin load warnings).
    warnings: tuple[str, ...] = ()

    @property
    def system_prompt(self) -> str | None:
        """The text of the leading system message, if any."""
        if self.messages and self.messages[0].role == "system":
            return "".join(p.text for p in self.messages[0].content if isinstance(p, TextPart))
        return None

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)


def next_request(session: AgentSession, text: str | None) -> GenerationRequest:
    """The first request of a turn on ``session`` for user ``text``, built by
    :meth:`TurnCore.begin_round` from the session's committed state (history, tool
    table, enabled and history-referenced tools, reasoning stripping, merged options,
    ceilings): the same path a turn takes, so nothing is assembled twice.

    Local helper until ``AgentSession`` offers a public ``next_request(text)``; it reads
    the session's private state and has no side effects (no events, no history).
    """
    public = getattr(session, "next_request", None)
    if callable(public):  # AgentSession.next_request, once the harness offers it
        request = public(text)
        assert isinstance(request, GenerationRequest)
        return request
    core = TurnCore(
        turn_id=new_id(),
        user_message=Message("user", text if text is not None else ""),
        history=session._history,
        history_size=session._history_size,
        tools=session._table,
        enabled=session._enabled,
        history_tools=session._history_tools,
        strip_reasoning=session._strip,
        options=session._merged_options(None),
        ceilings=session._ceilings,
    )
    request, _events = core.begin_round()
    return request


__all__ = ["SessionContext", "next_request"]
