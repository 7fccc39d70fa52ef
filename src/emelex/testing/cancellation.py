"""The property-based cancellation suite, public so you can run it on your own code.

:func:`scenarios` generates whole turns: scripted model rounds (deltas, reasoning,
tool calls, waits), tools with scripted behaviour (duration, cancellation policy,
cooperative or not, failing, needing approval), approval decisions and delays, and one
disruption: an :class:`~emelex.agent.AgentCancellation`, a cancelled caller scope, or a
failing event consumer, at an arbitrary moment. :func:`run_scenario` runs one on a
``MockClock`` and :func:`check_invariants` asserts what must hold after every turn.
:func:`check_tool_contract` runs the relevant properties against your own tool.

Needs ``hypothesis`` (a dev dependency); import this module explicitly.
"""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Sequence
from typing import Any, Literal

import attrs
import trio
import trio.testing
from hypothesis import strategies as st

from emelex.agent import (
    AgentCancellation,
    AgentError,
    AgentEvent,
    AgentSession,
    AgentSessionBuilder,
    AgentTurn,
    AnswerDelta,
    ApprovalRequested,
    ApprovalResolved,
    Deny,
    EventConsumerError,
    ModelCompleted,
    ModelStarted,
    ToolCancellationPolicy,
    ToolCompleted,
    ToolStarted,
    TurnCancelled,
    validate_history,
)
from emelex.model import Message
from emelex.runtime import open_supervisor
from emelex.testing._contract import (
    ContractReport,
    RunRecord,
    check_tool_contract,
    check_tool_contract_async,
)
from emelex.testing._errors import (
    ContractOptionsError,
    ToolAlwaysFails,
    ToolContractError,
    ToolContractViolation,
)
from emelex.testing._scripted import Call, Finish, Say, ScriptedModel, Step, Think, Wait
from emelex.testing._subagent import ScriptedSubAgent
from emelex.testing._tools import REVIEWED, ScriptedApprovals, ScriptedHook, ScriptedTool

# ScriptedModel's provider-local ids look like 'call_0'.
_PROVIDER_ID = re.compile(r"'call_\d+'")

Disruption = Literal["none", "agent", "scope", "consumer"]


@attrs.frozen
class ToolPlan:
    name: str
    duration: int
    policy: ToolCancellationPolicy
    cooperative: bool
    fails: bool
    needs_approval: bool

    def build(self) -> ScriptedTool:
        return ScriptedTool(
            self.name,
            duration=self.duration,
            policy=self.policy,
            cooperative=self.cooperative,
            fails=self.fails,
            approval=f"run {self.name}" if self.needs_approval else None,
        )


@attrs.frozen
class ChildPlan:
    """A sub-agent tool (named ``sub``) of the generated turn: each call runs one child
    turn of ``rounds`` with ``tools``, its approvals asked of the parent's policy."""

    rounds: tuple[tuple[Step, ...], ...]
    tools: tuple[ToolPlan, ...]
    policy: ToolCancellationPolicy

    def bound(self, delay: int) -> float:
        """Most MockClock seconds one child turn takes."""
        waits = sum(s.seconds for r in self.rounds for s in r if isinstance(s, Wait))
        calls = sum(1 for r in self.rounds for s in r if isinstance(s, Call))
        return waits + calls * (max(t.duration for t in self.tools) + delay)


@attrs.frozen
class Scenario:
    """One generated turn and its disruption (times are MockClock seconds)."""

    rounds: tuple[tuple[Step, ...], ...]
    tools: tuple[ToolPlan, ...]
    approvals: tuple[bool, ...]
    approval_delay: int
    disruption: Disruption
    at: float  # disruption time; for "consumer", the index of the failing event
    child: ChildPlan | None = None
    #: Seconds a :class:`ScriptedHook` takes at each call and result (None: no hook).
    hook_delay: int | None = None


def _tool_plans(prefix: str = "tool") -> st.SearchStrategy[tuple[ToolPlan, ...]]:
    plan = st.builds(
        ToolPlan,
        name=st.just(""),
        duration=st.integers(0, 4),
        policy=st.sampled_from(ToolCancellationPolicy),
        cooperative=st.booleans(),
        fails=st.booleans(),
        needs_approval=st.booleans(),
    )
    return st.lists(plan, min_size=1, max_size=3).map(
        lambda plans: tuple(attrs.evolve(p, name=f"{prefix}{i}") for i, p in enumerate(plans))
    )


_text = st.text(alphabet="abc xyz", min_size=1, max_size=4)


@st.composite
def _round(draw: st.DrawFn, tool_names: Sequence[str], final: bool) -> tuple[Step, ...]:
    steps: list[Step] = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["say", "think", "wait"]))
        if kind == "say":
            steps.append(Say(draw(_text)))
        elif kind == "think":
            steps.append(Think(draw(_text)))
        else:
            steps.append(Wait(draw(st.integers(0, 3))))
    if not final:
        names = [*tool_names, "missing_tool"]
        for _ in range(draw(st.integers(1, 3))):
            steps.append(Call(draw(st.sampled_from(names)), {}))
    elif draw(st.booleans()):
        # A terminal answer longer than its deltas: the harness must emit the suffix.
        said = "".join(step.text for step in steps if isinstance(step, Say))
        steps.append(Finish(text=said + draw(_text)))
    return tuple(steps)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    """Hypothesis strategy for :class:`Scenario`."""
    tools = draw(_tool_plans())
    names = [tool.name for tool in tools]
    child: ChildPlan | None = None
    if draw(st.booleans()):
        child_tools = draw(_tool_plans("child"))
        child_names = [tool.name for tool in child_tools]
        child_rounds = tuple(
            draw(_round(child_names, final=False)) for _ in range(draw(st.integers(0, 2)))
        )
        child_rounds += (draw(_round(child_names, final=True)),)
        policy = draw(st.sampled_from(ToolCancellationPolicy))
        child = ChildPlan(child_rounds, child_tools, policy)
        names.append("sub")
    tool_rounds = draw(st.integers(0, 3))
    rounds = tuple(draw(_round(names, final=False)) for _ in range(tool_rounds))
    rounds += (draw(_round(names, final=True)),)
    disruption: Disruption = draw(st.sampled_from(["none", "agent", "scope", "consumer"]))
    at = (
        float(draw(st.integers(0, 40)))
        if disruption == "consumer"
        else draw(st.integers(0, 30)) + 0.5
    )
    return Scenario(
        rounds=rounds,
        tools=tools,
        approvals=tuple(draw(st.lists(st.booleans(), max_size=10))),
        approval_delay=draw(st.integers(0, 2)),
        disruption=disruption,
        at=at,
        child=child,
        hook_delay=draw(st.none() | st.integers(0, 2)),
    )


@attrs.define
class Outcome:
    """What one run observed, for :func:`check_invariants`."""

    scenario: Scenario
    events: list[tuple[float, AgentEvent]]
    history: tuple[Message, ...]
    tools: dict[str, ScriptedTool]
    approvals: ScriptedApprovals
    turn: AgentTurn | None
    error: BaseException | None
    cancelled_by_scope: bool
    finished_at: float
    leftover_actors: int
    leftover_threads: int
    tool_names: tuple[str, ...]
    child_tools: dict[str, ScriptedTool] = attrs.Factory(dict)
    sub: ScriptedSubAgent | None = None


def _time_bound(scenario: Scenario) -> float:
    waits = sum(s.seconds for r in scenario.rounds for s in r if isinstance(s, Wait))
    calls = sum(1 for r in scenario.rounds for s in r if isinstance(s, Call))
    longest: float = max(tool.duration for tool in scenario.tools)
    if scenario.child is not None:
        longest = max(longest, scenario.child.bound(scenario.approval_delay))
    hooks = 2 * (scenario.hook_delay or 0)
    return waits + calls * (longest + scenario.approval_delay + hooks) + 1


def run_scenario(scenario: Scenario) -> Outcome:
    """Run ``scenario`` in a fresh ``trio.run`` on an autojumping MockClock."""
    tools = {plan.name: plan.build() for plan in scenario.tools}
    approvals = ScriptedApprovals(list(scenario.approvals), delay=scenario.approval_delay)
    child = scenario.child
    child_tools = {} if child is None else {plan.name: plan.build() for plan in child.tools}
    events: list[tuple[float, AgentEvent]] = []
    box: dict[str, Any] = {}

    def consume(event: AgentEvent) -> None:
        events.append((trio.current_time(), event))
        if scenario.disruption == "consumer" and len(events) == int(scenario.at) + 1:
            raise RuntimeError("scripted consumer failure")

    async def main() -> None:
        with tempfile.TemporaryDirectory() as workspace:
            builder = _builder(scenario, workspace, tools, approvals, child_tools, box)
            async with open_supervisor("cancellation-suite") as supervisor:
                with builder.build() as session:
                    box["tool_names"] = session.available_tools
                    cancellation = AgentCancellation()
                    with trio.fail_after(_time_bound(scenario)):
                        async with trio.open_nursery() as nursery:
                            with trio.CancelScope() as caller:
                                if scenario.disruption in ("agent", "scope"):
                                    nursery.start_soon(_disrupt, scenario, cancellation, caller)
                                try:
                                    box["turn"] = await session.run(
                                        "go", cancellation=cancellation, on_event=consume
                                    )
                                except AgentError as exc:
                                    box["error"] = exc
                            box["scope"] = caller.cancelled_caught
                            # Stop the disrupter only now: cancelling its (outer) scope
                            # earlier would capture the caller's own cancellation.
                            nursery.cancel_scope.cancel()
                    box["finished_at"] = trio.current_time()
                    box["history"] = session.history
                box["actors"] = len(supervisor.snapshot())

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    threads = sum(1 for t in threading.enumerate() if t.name.startswith("emelex-worker"))
    return Outcome(
        scenario=scenario,
        events=events,
        history=box["history"],
        tools=tools,
        approvals=approvals,
        turn=box.get("turn"),
        error=box.get("error"),
        cancelled_by_scope=box["scope"],
        finished_at=box["finished_at"],
        leftover_actors=box["actors"],
        leftover_threads=threads,
        tool_names=box["tool_names"],
        child_tools=child_tools,
        sub=box.get("sub"),
    )


def _builder(
    scenario: Scenario,
    workspace: str,
    tools: dict[str, ScriptedTool],
    approvals: ScriptedApprovals,
    child_tools: dict[str, ScriptedTool],
    box: dict[str, Any],
) -> AgentSessionBuilder:
    builder = (
        AgentSession.builder(ScriptedModel([list(r) for r in scenario.rounds]), workspace)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tools(tools.values())
        .approval_policy(approvals)
    )
    if scenario.hook_delay is not None:
        builder.hook(ScriptedHook(scenario.hook_delay))
    child = scenario.child
    if child is not None:
        sub = ScriptedSubAgent(
            "sub", child.rounds, list(child_tools.values()), approvals, workspace, child.policy
        )
        box["sub"] = sub
        builder.tool(sub)
    return builder


async def _disrupt(
    scenario: Scenario, cancellation: AgentCancellation, caller: trio.CancelScope
) -> None:
    await trio.sleep(scenario.at)
    if scenario.disruption == "agent":
        cancellation.cancel()
    else:
        caller.cancel()


def check_invariants(outcome: Outcome) -> None:
    """Assert every property the harness guarantees after a turn (AssertionError)."""
    scenario = outcome.scenario
    events = [event for _, event in outcome.events]
    # Nothing is left behind.
    assert outcome.leftover_actors == 0, "actors outlived the turn"
    assert outcome.leftover_threads == 0, "threads outlived the turn"
    # History is structurally complete: every call has exactly one result.
    # (Structure only: a model may propose an unknown tool; its call is answered with an
    # error result and committed like any other.)
    validate_history(outcome.history, None)
    started = {e.call_id for e in events if isinstance(e, ToolStarted)}
    disrupted = outcome.turn is None
    if disrupted:
        assert outcome.error is not None or outcome.cancelled_by_scope
        if scenario.disruption == "consumer":
            assert isinstance(outcome.error, EventConsumerError)
        elif scenario.disruption == "agent":
            assert isinstance(outcome.error, TurnCancelled)
        # Rollback happened iff no tool may have run.
        if not started:
            assert outcome.history == (), "rolled back turn left history behind"
        else:
            assert outcome.history, "a turn where tools ran must checkpoint"
            if isinstance(outcome.error, AgentError):
                assert outcome.error.rolled_back is False
                assert outcome.error.checkpoint == outcome.history
        if scenario.disruption in ("agent", "scope"):
            # No call started after the cancellation.
            starts = [t for t, e in outcome.events if isinstance(e, ToolStarted)]
            assert all(t < scenario.at for t in starts), "a call started after cancellation"
    else:
        assert outcome.error is None
        assert outcome.history == outcome.turn.messages  # type: ignore[union-attr]
    results: dict[str, int] = {}
    for message in outcome.history:
        if message.role == "tool" and message.tool_call_id is not None:
            results[message.tool_call_id] = results.get(message.tool_call_id, 0) + 1
    for tool in outcome.tools.values():
        for call_id in tool.started:
            if tool.policy is ToolCancellationPolicy.FINISH_ONCE_STARTED:
                # A started FINISH_ONCE_STARTED tool produced exactly one terminal result.
                assert call_id in tool.finished, "a started tool did not finish"
                assert results.get(call_id) == 1, "its result is not in history"
                completed = [
                    e for e in events if isinstance(e, ToolCompleted) and e.call_id == call_id
                ]
                assert len(completed) <= 1
    # Denied calls never ran; every approval was asked for a distinct call.
    denied = {
        e.call_id
        for e in events
        if isinstance(e, ApprovalResolved) and isinstance(e.decision, Deny)
    }
    ran = {call_id for tool in outcome.tools.values() for call_id in tool.started}
    assert not denied & ran, "a denied call ran"
    asked = [e.call_id for e in events if isinstance(e, ApprovalRequested)]
    own = [context for context in outcome.approvals.asked if not context.chain]
    assert len(asked) == len(set(asked)) == len(own)
    _check_child(outcome, events)
    _check_reviewed(outcome, started)
    # Delta concatenation equals each completed answer.
    deltas: dict[int, list[str]] = {}
    for event in events:
        if isinstance(event, AnswerDelta):
            deltas.setdefault(event.round, []).append(event.text)
        elif isinstance(event, ModelCompleted):
            assert "".join(deltas.get(event.round, [])) == event.response.text
    if outcome.turn is not None:
        last = max((e.round for e in events if isinstance(e, ModelStarted)), default=0)
        assert "".join(deltas.get(last, [])) == outcome.turn.response.text
    # Provider ids never appear after re-identification.
    visible = repr(events) + repr(outcome.history)
    assert not _PROVIDER_ID.search(visible), "a provider-local id leaked"
    # The turn returned within its bound (run_scenario enforces it with fail_after).
    assert outcome.finished_at <= _time_bound(scenario)


def _check_reviewed(outcome: Outcome, started: set[str]) -> None:
    """With a result hook, no executed call's result enters history unreviewed: it is
    the hook's replacement, withheld, or interrupted."""
    if outcome.scenario.hook_delay is None:
        return
    for message in outcome.history:
        if message.role != "tool" or message.tool_call_id not in started:
            continue
        text = message.text
        # The harness's own synthetic results for a call cut short (see its docs).
        assert text.startswith((REVIEWED, "result withheld:", "interrupted:")), (
            f"an unreviewed result entered history: {text!r}"
        )


def _check_child(outcome: Outcome, events: list[AgentEvent]) -> None:
    """The sub-agent's child turns keep the same invariants, seen from the parent."""
    sub = outcome.sub
    if sub is None:
        return
    started = [e for e in events if isinstance(e, ToolStarted) and e.name == "sub"]
    # Every started sub-agent call ran its child turn to an end (nothing detached).
    assert len(sub.histories) == len(started), "a child turn did not end with its call"
    for history in sub.histories:
        validate_history(history, None)
    results: dict[str, int] = {}
    for history in sub.histories:
        for message in history:
            if message.role == "tool" and message.tool_call_id is not None:
                results[message.tool_call_id] = results.get(message.tool_call_id, 0) + 1
    for tool in outcome.child_tools.values():
        for call_id in tool.started:
            if tool.policy is ToolCancellationPolicy.FINISH_ONCE_STARTED:
                assert call_id in tool.finished, "a started child tool did not finish"
                assert results.get(call_id) == 1, "its result is not in the child's history"
    # The child's approvals reached the parent's policy with the chain; denied ones
    # never ran.
    decisions = outcome.scenario.approvals
    sub_calls = {e.call_id for e in started}
    ran = {call_id for tool in outcome.child_tools.values() for call_id in tool.started}
    for index, context in enumerate(outcome.approvals.asked):
        if not context.chain:
            continue
        assert [link.tool for link in context.chain] == ["sub"]
        assert context.chain[0].call_id in sub_calls, "a child asked outside a started call"
        if not (index < len(decisions) and decisions[index]):
            assert context.call.id not in ran, "a denied child call ran"


# -- your own tools: see emelex.testing._contract ----------------------------------------


__all__ = [
    "ContractOptionsError",
    "ContractReport",
    "RunRecord",
    "ToolAlwaysFails",
    "ToolContractError",
    "ToolContractViolation",
    "check_tool_contract_async",
    "ChildPlan",
    "Disruption",
    "Outcome",
    "Scenario",
    "ToolPlan",
    "check_invariants",
    "check_tool_contract",
    "run_scenario",
    "scenarios",
]
