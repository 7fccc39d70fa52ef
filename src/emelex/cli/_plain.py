"""The session of a plain ``emelex run`` / ``emelex chat`` (no agent package).

The command line is turned into an :class:`~emelex.app.Agent` on a real directory
and a harness, and the :class:`~emelex.app.Engine` starts the session, exactly as it
does for packages and applications: the Engine alone decides the built-in tools, the
workspace policy around them and the authority snapshot.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from emelex.agent import ApprovalPolicy
from emelex.app import Agent, Engine, Harness, Session, WorkspacePolicy
from emelex.model import Client, GenerationOptions, Message

#: The plain session's instructions (the workspace section follows them).
PLAIN_INSTRUCTIONS = (
    "You are emelex, an assistant working for the user at their command line. "
    "Do what the user asks; use your tools when they help."
)


def plain_agent(
    client: Client,
    workspace: str,
    approver: ApprovalPolicy,
    *,
    max_tokens: int | None,
    shell: bool,
    file_tools: bool,
) -> tuple[Agent, Harness]:
    """The agent and harness of a plain run in ``workspace``: file tools (writes and
    edits asked for approval) and the shell unless switched off, no recursive-delete
    guard and no hidden paths (what a plain run has always allowed). Raises
    :class:`~emelex.app.InvalidWorkspaceRoot` for a missing directory."""
    agent = (
        Agent.builder()
        .name("emelex")
        .instructions(PLAIN_INSTRUCTIONS)
        .client(client)
        .approver(approver)
        .workspace(workspace)
        .workspace_policy(WorkspacePolicy.read_write().allow_recursive_delete())
        .options(GenerationOptions(max_tokens=max_tokens))
        .build()
    )
    harness = attrs.evolve(Harness.base(), name="cli", files=file_tools, shell=shell)
    return agent, harness


async def start_plain_session(
    engine: Engine,
    agent: Agent,
    harness: Harness,
    *,
    max_rounds: int,
    history: Sequence[Message] = (),
    committed: bool = False,
    session_id: str | None = None,
) -> Session:
    """Start the plain session through ``engine``, resumed from ``history``
    (``committed``: read back from the command's own store, see
    :meth:`~emelex.app.SessionStarter.history`)."""
    starter = engine.create(agent).harness(harness).history(history, committed=committed)
    if session_id is not None:
        starter.session_id(session_id)
    session = await starter.start()
    session.agent_session.max_rounds = max_rounds
    return session


__all__ = ["PLAIN_INSTRUCTIONS", "plain_agent", "start_plain_session"]
