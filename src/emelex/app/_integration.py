"""The engine's extension point: integrations (MCP clients, plugin loaders) that
contribute tools and prompt text to each session. Its own module so the integrations
and the engine that loads them both import it, and neither imports the other."""

from __future__ import annotations

import pathlib
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from emelex.app._capabilities import tools_tuple
from emelex.tools import AgentTool

if TYPE_CHECKING:
    from emelex.app._agent import Agent


@attrs.frozen
class IntegrationRequest:
    """What an integration learns about the session it contributes to."""

    agent: Agent
    session_id: str
    workspace_root: pathlib.Path


def _texts(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


def _names(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


@attrs.frozen
class Contribution:
    """What an integration adds to one session.

    ``handles`` names the parts of the agent it took care of (``"mcp_servers"``,
    ``"plugins"``); a session whose agent has MCP servers or plugins that no
    integration handles fails to start with :class:`IntegrationMissing`. ``close`` is
    awaited when the session closes.
    """

    tools: tuple[AgentTool, ...] = attrs.field(default=(), converter=tools_tuple)
    prompt_sections: tuple[str, ...] = attrs.field(default=(), converter=_texts)
    handles: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    close: Callable[[], Awaitable[None]] | None = None
    #: Non-fatal problems (e.g. plugin load warnings), shown by ``inspect()``.
    warnings: tuple[str, ...] = attrs.field(default=(), converter=_texts)


@runtime_checkable
class Integration(Protocol):
    """An engine extension that contributes tools and prompt text to each session
    (the extension point for MCP clients and plugin loaders)."""

    async def open(self, request: IntegrationRequest) -> Contribution: ...
