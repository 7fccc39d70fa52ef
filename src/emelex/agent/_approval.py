"""Approval policies: one-shot decisions about exact tool calls."""

from __future__ import annotations

from typing import Protocol, TypeAlias, runtime_checkable

import attrs

from emelex.model import ToolCall, ToolDefinition


@attrs.frozen
class ApprovalLink:
    """One delegating call above the call being approved: ``tool`` (called by agent
    ``agent`` in ``session_id``/``turn_id`` as call ``call_id``) started the turn the
    call belongs to."""

    agent: str
    session_id: str
    turn_id: str
    call_id: str
    tool: str


@attrs.frozen
class ApprovalContext:
    """What a policy decides on: the exact call (harness id and validated arguments),
    the tool's declaration, the tool's sentence naming the action and the canonical
    path of the session's workspace root (None when unknown), which relative paths in
    the arguments are relative to."""

    session_id: str
    turn_id: str
    call: ToolCall
    tool: ToolDefinition
    reason: str
    workspace_root: str | None = attrs.field(default=None, kw_only=True)
    #: The delegating calls above this one, outermost first; empty for a call the
    #: session's own model made. A sub-agent's approvals reach the parent's policy
    #: with the chain that led to them.
    chain: tuple[ApprovalLink, ...] = attrs.field(default=(), kw_only=True)

    @property
    def path(self) -> str:
        """The chain as text, e.g. ``"delegate → read_file"``."""
        return " → ".join([*(link.tool for link in self.chain), self.call.name])


@attrs.frozen
class Approve:
    """Run this one call. Nothing is remembered: the next call asks again."""


@attrs.frozen
class Deny:
    reason: str = "denied by approval policy"


ApprovalDecision: TypeAlias = Approve | Deny


@runtime_checkable
class ApprovalPolicy(Protocol):
    """Decides one call at a time. ``decide`` may wait (e.g. for a human); the harness
    runs it as an approval actor that is cancelled with the turn."""

    async def decide(self, context: ApprovalContext) -> ApprovalDecision: ...


class DenyAll:
    """The default policy: every request for approval is denied."""

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        return Deny("no approval policy is configured (the default denies every call)")


class ChainedApproval:
    """Asks ``parent`` with ``link`` put in front of each context's chain: how a child
    session's approvals reach the policy of the session that delegated to it."""

    def __init__(self, parent: ApprovalPolicy, link: ApprovalLink) -> None:
        self.parent = parent
        self.link = link

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        chained = attrs.evolve(context, chain=(self.link, *context.chain))
        return await self.parent.decide(chained)
