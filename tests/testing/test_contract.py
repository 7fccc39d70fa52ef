"""check_tool_contract: good tools pass; each way of breaking the contract is caught and
told apart from the tool merely failing."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
import trio

from emelex import EmelexError
from emelex.agent import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.testing import (
    ContractOptionsError,
    ContractReport,
    ScriptedTool,
    ToolAlwaysFails,
    ToolContractViolation,
    check_tool_contract,
    check_tool_contract_async,
)
from emelex.tools import FunctionTool, tool


@tool(interruptible=True)
async def steady(times: int) -> str:
    """Counts, checkpointing as it goes."""
    for _ in range(times):
        await trio.sleep(0.002)
    return f"counted {times}"


@tool
async def broken() -> str:
    """Always fails."""
    raise RuntimeError("the database is down")


def test_a_good_interruptible_tool_passes_with_a_clean_first_run() -> None:
    report = check_tool_contract(steady, {"times": 5}, runs=8, max_cancel_delay=0.02)
    assert isinstance(report, ContractReport)
    assert report.runs == 8
    first = report.records[0]
    assert first.cancel_after is None
    assert first.completed and first.started and first.result == "ok"
    assert first.violations == ()
    assert report.violations == () and report.failures == ()
    assert report.completed >= 2  # runs 0 and 4 are never cancelled
    assert report.completed + report.cancelled == 8


def test_a_good_finish_once_started_tool_passes() -> None:
    report = check_tool_contract(
        ScriptedTool("steady", duration=0.01), {}, runs=8, max_cancel_delay=0.02
    )
    assert report.violations == ()
    cancelled_after_start = [r for r in report.records if r.started and not r.completed]
    # A finish-once-started call always ends with its own result, never "interrupted".
    assert all(r.result == "ok" for r in cancelled_after_start)


def test_a_tool_failing_every_run_fails_the_check_as_a_failure_not_a_violation() -> None:
    with pytest.raises(ToolAlwaysFails, match="failed on every run") as caught:
        check_tool_contract(broken, {}, runs=4)
    report = caught.value.report
    assert report.violations == ()
    assert report.always_failed
    assert "the database is down" in (report.failures[0].error or "")
    assert isinstance(caught.value, AssertionError)


def test_allow_failures_returns_the_report_of_an_always_failing_tool() -> None:
    report = check_tool_contract(broken, {}, runs=4, allow_failures=True)
    assert report.always_failed
    assert len(report.failures) == sum(r.result == "error" for r in report.records) >= 1


def test_a_tool_that_fails_only_sometimes_passes_and_its_failures_are_listed() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls % 2 == 0:
            raise RuntimeError("flaked")
        return "fine"

    report = check_tool_contract(tool(flaky), {}, runs=6, max_cancel_delay=0.0)
    assert not report.always_failed
    assert report.failures
    assert all("flaked" in (r.error or "") for r in report.failures)


def test_a_leaked_thread_is_a_violation_even_when_emelex_did_not_name_it() -> None:
    release = threading.Event()
    threads: list[threading.Thread] = []

    async def spawn_thread() -> str:
        thread = threading.Thread(target=release.wait, name="sneaky-background")
        thread.start()
        threads.append(thread)
        return "started"

    try:
        with pytest.raises(ToolContractViolation, match="left behind: thread 'sneaky") as caught:
            check_tool_contract(tool(spawn_thread), {}, runs=4, leak_grace=0.05)
    finally:
        release.set()
        for thread in threads:
            thread.join(5)
    report = caught.value.report
    assert report.runs == 1  # run 0: stops at the first violation
    assert report.violations[0].result == "ok"  # it did not fail: it broke the contract
    assert report.failures == ()


def test_an_abandoned_to_thread_call_is_a_leaked_thread() -> None:
    release = threading.Event()

    async def abandon() -> str:
        # Gives up soon; abandon_on_cancel leaves the worker thread running.
        with trio.move_on_after(0.02):
            await trio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
        return "gave up"

    try:
        with pytest.raises(ToolContractViolation, match=r"left behind: thread '.*in wait"):
            check_tool_contract(tool(abandon), {}, runs=2, leak_grace=0.05)
    finally:
        release.set()


def test_a_leaked_subprocess_is_a_violation() -> None:
    children: list[subprocess.Popen[bytes]] = []

    async def spawn_child() -> str:
        # Deliberately bad: started and never waited for (spawning blocks only briefly).
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # noqa: ASYNC220
        children.append(child)
        return f"started {child.pid}"

    try:
        with pytest.raises(ToolContractViolation, match="left behind: process") as caught:
            check_tool_contract(tool(spawn_child), {}, runs=2, leak_grace=0.05)
    finally:
        for child in children:
            child.kill()
            child.wait()
    assert str(children[0].pid) in str(caught.value)


def test_a_subprocess_the_tool_waits_for_is_not_a_leak() -> None:
    async def run_child() -> str:
        done = await trio.run_process([sys.executable, "-c", "pass"])
        return f"exit {done.returncode}"

    report = check_tool_contract(tool(run_child), {}, runs=4, max_cancel_delay=0.01)
    assert report.violations == ()


def test_a_trio_task_smuggled_into_a_system_nursery_is_a_violation() -> None:
    async def smuggle() -> str:
        trio.lowlevel.spawn_system_task(trio.sleep_forever, name="smuggled-task")
        return "done"

    with pytest.raises(ToolContractViolation, match="left behind: Trio task 'smuggled-task'"):
        check_tool_contract(tool(smuggle), {}, runs=2, leak_grace=0.05)


def test_run_zero_that_times_out_is_not_called_a_cancellation_problem() -> None:
    async def slow() -> str:
        await trio.sleep(5)
        return "late"

    with pytest.raises(ToolContractViolation) as caught:
        check_tool_contract(tool(slow), {}, runs=4, time_limit=0.2)
    message = str(caught.value)
    assert "run 0 (not cancelled)" in message
    assert "it was not cancelled" in message
    assert "ignores cancellation" not in message


def test_a_tool_ignoring_cancellation_is_named_so_on_a_cancelled_run() -> None:
    first = {"run": True}

    class Stubborn(ScriptedTool):
        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            if first.pop("run", False):
                return ToolOutput("quick")  # run 0 (not cancelled) is clean
            # Claims to be interruptible, then shields itself from cancellation.
            with trio.CancelScope(shield=True):
                await trio.sleep(0.6)
            return ToolOutput("ok")

    tool_ = Stubborn("bad", policy=ToolCancellationPolicy.INTERRUPTIBLE)
    with pytest.raises(ToolContractViolation, match="ignores cancellation") as caught:
        check_tool_contract(tool_, {}, runs=4, max_cancel_delay=0.01, time_limit=0.3)
    assert caught.value.report.records[0].violations == ()


def test_bad_options_are_rejected() -> None:
    with pytest.raises(ContractOptionsError, match="runs"):
        check_tool_contract(steady, {"times": 1}, runs=0)
    with pytest.raises(ContractOptionsError, match="time_limit"):
        check_tool_contract(steady, {"times": 1}, time_limit=-1)
    with pytest.raises(ContractOptionsError, match="leak_grace"):
        check_tool_contract(steady, {"times": 1}, leak_grace=float("nan"))
    assert issubclass(ContractOptionsError, EmelexError)
    assert issubclass(ToolContractViolation, EmelexError)
    assert issubclass(ToolAlwaysFails, EmelexError)


async def test_the_async_form_refuses_a_mock_clock(autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(ContractOptionsError, match="real clock"):
        await check_tool_contract_async(steady, {"times": 1}, runs=1)


# -- the async form ----------------------------------------------------------------------


async def test_the_async_form_runs_inside_a_trio_test() -> None:
    report = await check_tool_contract_async(steady, {"times": 3}, runs=6, max_cancel_delay=0.01)
    assert report.runs == 6 and report.violations == ()
    assert report.records[0].result == "ok"


async def test_the_async_form_catches_a_task_started_in_a_smuggled_nursery(
    nursery: trio.Nursery,
) -> None:
    async def smuggle() -> str:
        nursery.start_soon(trio.sleep_forever, name="smuggled-into-test")
        return "done"

    with pytest.raises(ToolContractViolation, match="Trio task 'smuggled-into-test'"):
        await check_tool_contract_async(tool(smuggle), {}, runs=2, leak_grace=0.05)
    nursery.cancel_scope.cancel()


async def test_the_async_form_catches_a_task_started_through_a_smuggled_token() -> None:
    token = trio.lowlevel.current_trio_token()
    async with trio.open_nursery() as outer:

        async def smuggle() -> str:
            token.run_sync_soon(lambda: outer.start_soon(trio.sleep_forever, name="via-token"))
            await trio.lowlevel.checkpoint()
            return "done"

        with pytest.raises(ToolContractViolation, match="Trio task 'via-token'"):
            await check_tool_contract_async(tool(smuggle), {}, runs=2, leak_grace=0.05)
        outer.cancel_scope.cancel()


async def test_the_async_form_reports_an_always_failing_tool() -> None:
    with pytest.raises(ToolAlwaysFails):
        await check_tool_contract_async(broken, {}, runs=2)


def test_a_dynamic_function_tool_is_checked_too() -> None:
    async def echo(arguments: dict[str, object]) -> str:
        await trio.lowlevel.checkpoint()
        return str(arguments)

    dynamic = FunctionTool(
        "echo", "echoes", {"type": "object", "properties": {"x": {"type": "integer"}}}, echo
    ).interruptible()
    report = check_tool_contract(dynamic, {"x": 1}, runs=4, max_cancel_delay=0.005)
    assert report.violations == () and report.records[0].result == "ok"
