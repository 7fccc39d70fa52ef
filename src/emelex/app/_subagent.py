"""Sub-agents as tools: another agent's turn runs as one tool call of the parent.

``Agent.as_tool(name=..., description=...)`` gives a :class:`SubAgentTool`. When a
parent session starts, the engine binds it to that session (:func:`bind_subagents`):
then each call starts a child session of the sub-agent, runs one turn on the task,
records its transcript in the parent's :class:`TranscriptBook` and returns the answer.

What the child may do never exceeds the parent: it works in the parent's workspace
under the narrower of the two workspace policies, a tool its parent does not have
refuses the call (:class:`SubAgentTooWide`), its approvals go to the parent's approval
policy with the delegating call in ``ApprovalContext.chain``, and its model calls are
counted by the parent's usage budget when the parent has one. The child session's
actors live below the parent's tool actor, so the turn's no-detached-work check covers
them, and the child turn has ended (its own tools under their policies, history
resolved) before the call returns, however it ends.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import attrs
import trio

from emelex.agent import (
    AgentCancellation,
    AgentTurn,
    ApprovalLink,
    ChainedApproval,
    DenyAll,
    NestedOutcome,
    NestedTurn,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
    ToolStarted,
    run_nested_turn,
)
from emelex.app._errors import EventsLagged, InvalidSubAgent, SubAgentTooWide
from emelex.app._policy import WorkspacePolicy
from emelex.model import Client, Message, ToolDefinition, Usage
from emelex.runtime import open_unwrapping_nursery
from emelex.tools import tool_name_problem

if TYPE_CHECKING:
    from emelex.app._agent import Agent
    from emelex.app._assembly import Assembly
    from emelex.app._budget import BudgetMeter
    from emelex.app._engine import Engine, Session
    from emelex.app._events import EventStream
    from emelex.app._harness import Harness


_SCHEMA = {
    "type": "object",
    "properties": {"task": {"type": "string", "description": "What the sub-agent should do."}},
    "required": ["task"],
    "additionalProperties": False,
}


@attrs.frozen
class SubAgentTranscript:
    """One sub-agent call: the parent's call (``call_id`` in ``parent_session_id``,
    ``parent_turn_id``) and the child session it ran (``session_id``), with every
    message the child committed (a checkpoint when it failed after a tool ran)."""

    call_id: str
    parent_session_id: str
    parent_turn_id: str
    agent: str
    session_id: str
    messages: tuple[Message, ...]
    usage: Usage
    outcome: NestedOutcome
    error: str | None = None


class TranscriptBook:
    """The sub-agent transcripts of one parent session, by the parent's call id (the
    id in the parent's history, its events and its approvals)."""

    def __init__(self) -> None:
        self._by_call: dict[str, SubAgentTranscript] = {}

    def add(self, transcript: SubAgentTranscript) -> None:
        self._by_call[transcript.call_id] = transcript

    def get(self, call_id: str) -> SubAgentTranscript | None:
        return self._by_call.get(call_id)

    def __iter__(self) -> Iterator[SubAgentTranscript]:
        return iter(tuple(self._by_call.values()))

    def __len__(self) -> int:
        return len(self._by_call)


@attrs.frozen
class ParentBinding:
    """What a sub-agent call inherits from the parent session it serves."""

    engine: Engine
    agent: Agent
    root: pathlib.Path
    tool_names: frozenset[str]
    book: TranscriptBook
    meter: BudgetMeter | None = None


def narrower(parent: WorkspacePolicy, child: WorkspacePolicy) -> WorkspacePolicy:
    """What both policies allow: writes and recursive deletes only if both do, every
    path either hides hidden."""
    hidden = tuple(dict.fromkeys((*parent.hidden, *child.hidden)))
    return WorkspacePolicy(
        write=parent.write and child.write,
        hidden=hidden,
        recursive_delete=parent.recursive_delete and child.recursive_delete,
    )


class SubAgentTool:
    """An :class:`~emelex.agent.AgentTool` running one turn of ``agent`` per call, with
    the argument ``task``. Make it with ``Agent.as_tool``; it runs only in a session
    an :class:`~emelex.app.Engine` started (which binds it to that session).

    ``harness`` is the child sessions' harness (default ``Harness.base()``),
    ``max_rounds`` caps their turns' model rounds and ``timeout`` (seconds) their
    duration: past it the child turn is cancelled and the call answers with an error.
    ``cancellation_policy`` is the call's policy when the parent turn is cancelled:
    ``FINISH_ONCE_STARTED`` (default) cancels the child turn and returns its result
    once the child has ended; ``INTERRUPTIBLE`` cancels the call's task, and the child
    turn still ends (its tools under their policies) before the call is dropped."""

    def __init__(
        self,
        agent: Agent,
        *,
        name: str,
        description: str,
        harness: Harness | None = None,
        max_rounds: int | None = None,
        timeout: float | None = None,
        cancellation_policy: ToolCancellationPolicy = ToolCancellationPolicy.FINISH_ONCE_STARTED,
        parent: ParentBinding | None = None,
    ) -> None:
        _check(name, description, max_rounds, timeout, cancellation_policy)
        self.agent = agent
        self._definition = ToolDefinition(name, description, _SCHEMA)
        self.harness = harness
        self.max_rounds = max_rounds
        self.timeout = timeout
        self._policy = cancellation_policy
        self.parent = parent

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self._policy

    def approval_reason(self, arguments: Any) -> str | None:
        # Delegating asks nothing: each of the child's own gated calls asks the parent.
        return None

    def bound(self, parent: ParentBinding) -> SubAgentTool:
        """A copy serving ``parent``'s session."""
        return SubAgentTool(
            self.agent,
            name=self._definition.name,
            description=self._definition.description,
            harness=self.harness,
            max_rounds=self.max_rounds,
            timeout=self.timeout,
            cancellation_policy=self._policy,
            parent=parent,
        )

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        """Run the child turn. Checkpoints; returns an error result when the child
        fails, is cancelled or times out; raises trio.Cancelled (after the child has
        ended) when the call's task is cancelled."""
        parent = self.parent
        if parent is None:
            return ToolOutput.error(
                f"sub-agent tool {self._definition.name!r} runs only in a session an Engine started"
            )
        from emelex.app._harness import Harness

        child = self._child_agent(parent, invocation)
        starter = parent.engine.create(child).harness(self.harness or Harness.base())
        session = await starter.start()
        try:
            extra = tuple(sorted(set(session.tools) - parent.tool_names))
            if extra:
                raise SubAgentTooWide(
                    f"sub-agent {child.name!r} would have tools its parent lacks: "
                    f"{', '.join(extra)}",
                    tools=extra,
                )
            if self.max_rounds is not None:
                session.agent_session.max_rounds = self.max_rounds
            return await self._run(session, invocation, parent)
        finally:
            await session.aclose()  # shielded inside

    def _child_agent(self, parent: ParentBinding, invocation: ToolInvocation) -> Agent:
        link = ApprovalLink(
            parent.agent.name,
            invocation.session_id,
            invocation.turn_id,
            invocation.call.id,
            invocation.call.name,
        )
        approver = parent.agent.approver if parent.agent.approver is not None else DenyAll()
        client = self.agent.client
        if parent.meter is not None:
            from emelex.app._budget import BudgetedModel

            client = Client(BudgetedModel(client.model, parent.meter))
        return attrs.evolve(
            self.agent,
            client=client,
            approver=ChainedApproval(approver, link),
            workspace=parent.root,
            files=(),
            workspace_policy=narrower(parent.agent.workspace_policy, self.agent.workspace_policy),
        )

    async def _run(
        self, session: Session, invocation: ToolInvocation, parent: ParentBinding
    ) -> ToolOutput:
        task = str(invocation.arguments.get("task", ""))

        async def run(cancellation: AgentCancellation) -> AgentTurn:
            events = session.events()
            # Unwrapping: the turn's own error (TurnCancelled, ...) leaves as itself.
            async with open_unwrapping_nursery() as nursery:
                nursery.start_soon(_forward, events, invocation, session.agent.name)
                try:
                    turn: AgentTurn = await session.send_and_wait(task, cancellation=cancellation)
                finally:
                    # The turn has ended, however: closing the stream ends the forwarder
                    # (no scope of ours is cancelled, so the turn's own outcome, or the
                    # caller's cancellation, passes through unchanged).
                    events.close()
            return turn

        nested = NestedTurn("cancelled")  # what a cancelled caller scope leaves
        try:
            nested = await run_nested_turn(run, invocation, time_limit=self.timeout)
        finally:
            parent.book.add(
                SubAgentTranscript(
                    invocation.call.id,
                    invocation.session_id,
                    invocation.turn_id,
                    session.agent.name,
                    session.session_id,
                    session.history,
                    nested.turn.usage if nested.turn is not None else Usage(),
                    nested.outcome,
                    None if nested.error is None else str(nested.error),
                )
            )
        link = f"[sub-agent {session.agent.name!r}, session {session.session_id}]"
        if nested.turn is None:
            return ToolOutput.error(f"{nested.describe()}\n{link}")
        return ToolOutput(f"{nested.turn.response.text}\n\n{link}")


async def _forward(events: EventStream, invocation: ToolInvocation, agent: str) -> None:
    """Show the child's tool activity as progress of the parent's call (so a UI of the
    parent sees ``reader: read_file`` while the reader works). Checkpoints; a lagging
    stream just stops forwarding."""
    try:
        async for event in events:
            if isinstance(event, ToolStarted):
                await invocation.progress(f"{agent}: {event.name}")
    except (EventsLagged, trio.ClosedResourceError):
        return


def _check(
    name: object,
    description: object,
    max_rounds: int | None,
    timeout: float | None,
    policy: object,
) -> None:
    problem = tool_name_problem(name)
    if problem is not None:
        raise InvalidSubAgent(problem)
    if not isinstance(description, str) or not description.strip():
        raise InvalidSubAgent("a sub-agent tool needs a non-blank description")
    if max_rounds is not None and (
        isinstance(max_rounds, bool) or not isinstance(max_rounds, int) or max_rounds < 1
    ):
        raise InvalidSubAgent(f"max_rounds must be a positive integer, got {max_rounds!r}")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0
    ):
        raise InvalidSubAgent(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not isinstance(policy, ToolCancellationPolicy):
        raise InvalidSubAgent(
            f"cancellation_policy must be a ToolCancellationPolicy, not {policy!r}"
        )


def bind_subagents(
    assembly: Assembly, engine: Engine, agent: Agent, root: str, meter: BudgetMeter | None
) -> TranscriptBook:
    """Bind every :class:`SubAgentTool` of a parent session's assembled tools to that
    session (whose tool names are all assembled by now); returns its transcript book."""
    book = TranscriptBook()
    parent = ParentBinding(
        engine, agent, pathlib.Path(root), frozenset(assembly.owners), book, meter
    )
    assembly.tools = [
        tool.bound(parent) if isinstance(tool, SubAgentTool) else tool for tool in assembly.tools
    ]
    return book


__all__ = [
    "ChainedApproval",
    "ParentBinding",
    "SubAgentTool",
    "SubAgentTranscript",
    "TranscriptBook",
    "bind_subagents",
    "narrower",
]
