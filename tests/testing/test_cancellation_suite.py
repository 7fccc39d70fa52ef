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
from emelex.testing import ScriptedTool
from emelex.testing.cancellation import (
    Scenario,
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
