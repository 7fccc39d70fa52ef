"""The property-based cancellation suite (emelex.testing.cancellation) on the harness.

CI runs SUITE_EXAMPLES generated turns (2,000 by default); set EMELEX_THOROUGH=1 for the
documented thorough profile of 10,000.
"""

from __future__ import annotations

import os

import pytest
import trio
from hypothesis import HealthCheck, given, settings

from emelex.agent import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.testing import Call, Say, ScriptedTool
from emelex.testing.cancellation import (
    ChildPlan,
    Disruption,
    Scenario,
    ToolPlan,
    check_invariants,
    check_tool_contract,
    run_scenario,
    scenarios,
)

SUITE_EXAMPLES = 10_000 if os.environ.get("EMELEX_THOROUGH") else 2_000


@settings(
    max_examples=SUITE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(scenarios())
def test_every_generated_turn_keeps_the_invariants(scenario: Scenario) -> None:
    check_invariants(run_scenario(scenario))


def test_suite_detects_a_broken_invariant() -> None:
    scenario = Scenario(
        rounds=((__import__("emelex.testing").testing.Say("hi"),),),
        tools=(),
        approvals=(),
        approval_delay=0,
        disruption="none",
        at=0.5,
    )
    from emelex.testing.cancellation import ToolPlan

    scenario = Scenario(
        rounds=scenario.rounds,
        tools=(ToolPlan("tool0", 1, ToolCancellationPolicy.INTERRUPTIBLE, False, False, False),),
        approvals=(),
        approval_delay=0,
        disruption="none",
        at=0.5,
    )
    outcome = run_scenario(scenario)
    check_invariants(outcome)
    # Tamper with the observation: a leftover actor must be reported.
    outcome.leftover_actors = 1
    with pytest.raises(AssertionError, match="outlived"):
        check_invariants(outcome)


def test_check_tool_contract_accepts_a_well_behaved_tool() -> None:
    tool = ScriptedTool("steady", duration=0.01, cooperative=True)
    report = check_tool_contract(tool, {}, runs=12, max_cancel_delay=0.02)
    assert report.runs == 12
    assert report.completed + report.cancelled == 12
    assert report.completed >= 3  # every fourth run is not cancelled


def test_check_tool_contract_catches_a_tool_that_ignores_cancellation() -> None:
    class Stubborn(ScriptedTool):
        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            # Claims to be interruptible, then shields itself from cancellation.
            with trio.CancelScope(shield=True):
                await trio.sleep(1.0)
            return ToolOutput("ok")

    tool = Stubborn("bad", policy=ToolCancellationPolicy.INTERRUPTIBLE)
    with pytest.raises(AssertionError, match="did not return within"):
        check_tool_contract(tool, {}, runs=4, max_cancel_delay=0.01, time_limit=0.3)


# -- a nested sub-agent call -------------------------------------------------------------

NESTED_EXAMPLES = 2_000 if os.environ.get("EMELEX_THOROUGH") else 300


@settings(
    max_examples=NESTED_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(scenarios().filter(lambda s: s.child is not None and s.disruption != "none"))
def test_disrupted_turns_with_a_sub_agent_keep_the_invariants(scenario: Scenario) -> None:
    check_invariants(run_scenario(scenario))


def _nested(policy: ToolCancellationPolicy, disruption: Disruption, at: float) -> Scenario:
    child_tool = ToolPlan(
        "child0", 10, ToolCancellationPolicy.FINISH_ONCE_STARTED, True, False, True
    )
    child = ChildPlan(
        rounds=((Call("child0", {}),), (Say("child answer"),)),
        tools=(child_tool,),
        policy=policy,
    )
    return Scenario(
        rounds=((Call("sub", {}),), (Say("parent answer"),)),
        tools=(ToolPlan("tool0", 1, ToolCancellationPolicy.INTERRUPTIBLE, False, False, False),),
        approvals=(True,),
        approval_delay=1,
        disruption=disruption,
        at=at,
        child=child,
    )


@pytest.mark.parametrize("policy", list(ToolCancellationPolicy))
@pytest.mark.parametrize("disruption", ["agent", "scope"])
def test_cancelling_the_parent_mid_child_tool_ends_the_child_under_policy(
    policy: ToolCancellationPolicy, disruption: Disruption
) -> None:
    # The child's tool (approved through the parent's policy at t=1) runs from t=1 to
    # t=11; the parent is disrupted at t=4.5, inside it.
    outcome = run_scenario(_nested(policy, disruption, 4.5))
    check_invariants(outcome)
    assert outcome.leftover_actors == 0
    assert outcome.sub is not None and len(outcome.sub.histories) == 1
    (context,) = outcome.approvals.asked
    assert [link.tool for link in context.chain] == ["sub"]
    (child_tool,) = outcome.child_tools.values()
    assert child_tool.started == child_tool.finished  # cooperative: stopped early, one result
    # The cancellation reached the child at once, not after the child's tool ran out.
    assert outcome.finished_at == pytest.approx(4.5)
    if policy is ToolCancellationPolicy.FINISH_ONCE_STARTED and disruption == "agent":
        assert outcome.sub.outcomes == ["cancelled"]
        tool_results = [m.text for m in outcome.history if m.role == "tool"]
        assert tool_results[0].startswith("sub-agent cancelled")


def test_an_undisrupted_nested_call_completes() -> None:
    outcome = run_scenario(_nested(ToolCancellationPolicy.FINISH_ONCE_STARTED, "none", 0.5))
    check_invariants(outcome)
    assert outcome.turn is not None and outcome.turn.response.text == "parent answer"
    assert outcome.sub is not None and outcome.sub.outcomes == ["completed"]
    assert [m.text for m in outcome.history if m.role == "tool"] == ["child answer"]


# -- lifecycle hooks under disruption ----------------------------------------------------


def _hooked(disruption: Disruption, at: float) -> Scenario:
    # tool0 runs from t=1 (after the hook's 1 s at the call) to t=6; the hook then
    # reviews its result from t=6 to t=7.
    finish = ToolCancellationPolicy.FINISH_ONCE_STARTED
    tool = ToolPlan("tool0", 5, finish, cooperative=False, fails=False, needs_approval=False)
    return Scenario(
        rounds=((Call("tool0", {}),), (Say("done"),)),
        tools=(tool,),
        approvals=(),
        approval_delay=0,
        disruption=disruption,
        at=at,
        hook_delay=1,
    )


@pytest.mark.parametrize(
    ("disruption", "at", "result"),
    [
        ("none", 0.5, "[reviewed] tool0 done"),
        # Cancelled while the tool runs: its one result arrives, no hook reviews it.
        ("agent", 3.5, "result withheld:"),
        ("scope", 3.5, "result withheld:"),
        # Cancelled while the hook reviews: the result never entered the turn.
        ("agent", 6.5, "interrupted:"),
        ("scope", 6.5, "interrupted:"),
    ],
)
def test_a_result_no_hook_reviewed_never_enters_history(
    disruption: Disruption, at: float, result: str
) -> None:
    outcome = run_scenario(_hooked(disruption, at))
    check_invariants(outcome)
    (text,) = [m.text for m in outcome.history if m.role == "tool"]
    assert text.startswith(result)
