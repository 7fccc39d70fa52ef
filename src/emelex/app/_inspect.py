"""Inspecting the next model call through the harness's own request assembly."""

from __future__ import annotations

from typing import Any

import attrs

from emelex.agent import AgentSession
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
    #: Names of the session's lifecycle hooks, in the order they run.
    hooks: tuple[str, ...] = ()
    #: The sub-agent tools: (tool name, agent name) pairs.
    subagents: tuple[tuple[str, str], ...] = ()

    @property
    def system_prompt(self) -> str | None:
        """The text of the leading system message, if any."""
        if self.messages and self.messages[0].role == "system":
            return "".join(p.text for p in self.messages[0].content if isinstance(p, TextPart))
        return None

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(tool.name for tool in self.tools)


def composition(agent: Any) -> dict[str, Any]:
    """The ``hooks`` and ``subagents`` fields of an agent's :class:`SessionContext`."""
    from emelex.app._subagent import SubAgentTool

    return {
        "hooks": tuple(hook.name for hook in agent.hooks),
        "subagents": tuple(
            (tool.definition.name, tool.agent.name)
            for tool in agent.tools
            if isinstance(tool, SubAgentTool)
        ),
    }


def next_request(session: AgentSession, text: str | None) -> GenerationRequest:
    """The first request of a turn on ``session`` for user ``text``: built by the same
    path a turn takes (:meth:`AgentSession.next_request`), with no side effects."""
    return session.next_request(text)


__all__ = ["SessionContext", "next_request"]
