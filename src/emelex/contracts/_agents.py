"""Agents the Host knows, and the configuration schema of an agent package."""

from __future__ import annotations

from typing import Literal

from emelex.contracts._ids import AgentName
from emelex.contracts._limits import MAX_MESSAGE_CHARS, MAX_NAME_CHARS, MAX_TOOLS
from emelex.contracts._wire import count, items, text, wire

HarnessPreset = Literal["base", "conversation", "worker", "shellWorker"]
WorkspacePolicyName = Literal["readOnly", "readWrite"]


@wire
class ModelConfig:
    """The symbolic model binding the Host resolves (no credential travels on the wire)."""

    binding: str = text(min_len=1, max_len=MAX_NAME_CHARS)
    max_tokens: int | None = count(minimum=1, maximum=1_000_000)


@wire
class WorkspaceConfig:
    """The workspace policy of an agent: access mode and hidden path patterns."""

    policy: WorkspacePolicyName
    hidden: tuple[str, ...] = items(max_items=MAX_TOOLS)
    recursive_delete: bool


@wire
class AgentConfig:
    """An agent's configuration (the wire form of an agent package's manifest)."""

    name: AgentName
    description: str = text(max_len=MAX_MESSAGE_CHARS)
    version: str = text(min_len=1, max_len=64)
    model: ModelConfig
    harness: HarnessPreset
    workspace: WorkspaceConfig
    tools: tuple[str, ...] = items(max_items=MAX_TOOLS, limit="agent tools")


@wire
class AgentList:
    """Every agent the Host can start sessions of."""

    agents: tuple[AgentConfig, ...] = items(max_items=1024)
