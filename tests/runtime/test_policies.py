"""The three cancellation policies, with cancellation at every await point.

Each example runs its own ``trio.run`` on an autojumping MockClock: child steps take
whole seconds and the owner is cancelled at a half second, so every ordering is exact.
"""

from __future__ import annotations

import math

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.runtime import (
    ActorContext,
    ActorDropped,
    ActorKind,
    ActorState,
    CancellationPolicy,
    open_supervisor,
)


@attrs.define
class Plan:
    policy: CancellationPolicy
    durations: list[int]
    start_index: int  # FINISH_ONCE_STARTED: start point before this step
    cooperative: bool
    cancel_at: float | None  # None: never; -1: synchronously right after spawning
    fails: bool


plans = st.builds(
    Plan,
    policy=st.sampled_from(CancellationPolicy),
    durations=st.lists(st.integers(0, 3), min_size=1, max_size=5),
    start_index=st.integers(0, 4),
    cooperative=st.booleans(),
    cancel_at=st.one_of(st.none(), st.just(-1.0), st.integers(0, 16).map(lambda n: n + 0.5)),
    fails=st.booleans(),
)


@attrs.define
class Record:
    steps: list[int] = attrs.Factory(list)
    passed_start: bool = False
    stopped_early: bool = False


async def child(ctx: ActorContext, plan: Plan, record: Record) -> str:
    for index, duration in enumerate(plan.durations):
        if index == min(plan.start_index, len(plan.durations) - 1):
            await ctx.start_point()
            record.passed_start = True
        if plan.cooperative and ctx.cancel_requested:
            record.stopped_early = True
            return "stopped"
        await trio.sleep(duration)
        record.steps.append(index)
    if plan.fails:
        raise LookupError("child failed")
    return "complete"


def run_plan(plan: Plan) -> None:
    record = Record()

    async def main() -> None:
        async with open_supervisor("policy-test") as sup:
            with trio.CancelScope() as owner_scope:
                async with sup.open_actor(ActorKind.TURN, "owner") as turn:
                    call = turn.call(
                        child, plan, record, kind=ActorKind.TOOL, name="c", policy=plan.policy
                    )
                    if plan.cancel_at is not None:
                        if plan.cancel_at < 0:
                            owner_scope.cancel()
                        else:
                            owner_scope.deadline = trio.current_time() + plan.cancel_at
                    try:
                        value = await call.result()
                    except LookupError:
                        value = "error"
            exit_time = trio.current_time()
            assert sup.live_actors == 0
            assert len(sup.snapshot()) == 0
            check(plan, record, call, owner_scope, exit_time, locals().get("value"))

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def check(
    plan: Plan,
    record: Record,
    call: object,
    owner_scope: trio.CancelScope,
    exit_time: float,
    value: object,
) -> None:
    from emelex.runtime import ActorCall

    assert isinstance(call, ActorCall)
    total = sum(plan.durations)
    cancel_at = plan.cancel_at
    start_index = min(plan.start_index, len(plan.durations) - 1)
    start_time = sum(plan.durations[:start_index])
    cancelled = cancel_at is not None and (cancel_at < 0 or cancel_at < total)
    ends = [sum(plan.durations[: i + 1]) for i in range(len(plan.durations))]

    if not cancelled:
        assert not owner_scope.cancelled_caught or cancel_at is not None
        assert record.steps == list(range(len(plan.durations)))
        assert value == ("error" if plan.fails else "complete")
        assert exit_time == total
        assert call.finished and not call.dropped
        return

    assert owner_scope.cancelled_caught
    assert cancel_at is not None
    effective = max(cancel_at, 0.0)
    if plan.policy is CancellationPolicy.DROP or (
        plan.policy is CancellationPolicy.FINISH_ONCE_STARTED
        and (cancel_at < 0 or cancel_at < start_time)
    ):
        # Dropped immediately: the owner exits at the cancellation instant.
        assert exit_time == effective
        assert call.dropped and not call.finished
        if cancel_at < 0:
            assert record.steps == []  # cancelled before its first checkpoint
        else:
            assert record.steps == [i for i, end in enumerate(ends) if end <= effective]
        if plan.policy is CancellationPolicy.FINISH_ONCE_STARTED:
            assert not record.passed_start
        assert call.actor.state is ActorState.DONE
        return

    # AWAIT_COMPLETION, or FINISH_ONCE_STARTED after its start point: one terminal result.
    assert call.finished and not call.dropped
    if plan.cooperative:
        # The child sees the signal at its next step boundary and stops there. The policy
        # is applied inside the owner's cancellation (its wait's abort function), so a
        # cancellation issued before the child first ran is seen at the child's first check.
        boundaries = [0.0, *ends]
        stop = next((b for b in boundaries if b >= effective and (b < total)), total)
        if plan.policy is CancellationPolicy.FINISH_ONCE_STARTED:
            stop = max(stop, start_time)
        assert exit_time == stop
        if stop < total:
            assert record.stopped_early
            assert call.value == "stopped"
    else:
        assert exit_time == total
        assert record.steps == list(range(len(plan.durations)))
        if plan.fails:
            assert isinstance(call.error, LookupError)
        else:
            assert call.value == "complete"


@settings(max_examples=400, deadline=None)
@given(plans)
def test_policies_at_every_await_point(plan: Plan) -> None:
    run_plan(plan)


@pytest.mark.parametrize("policy", list(CancellationPolicy))
def test_each_policy_with_cancellation_before_child_runs(policy: CancellationPolicy) -> None:
    run_plan(Plan(policy, [1, 1], 0, False, -1.0, False))


async def test_explicit_cancel_drops_and_result_raises(autojump_clock: object) -> None:
    async def slow(ctx: ActorContext) -> int:
        await trio.sleep(10)
        return 1

    async with open_supervisor("s") as sup, sup.open_actor("turn", "t") as turn:
        call = turn.call(slow, kind="tool", name="slow")
        await trio.sleep(1)
        call.cancel()
        with pytest.raises(ActorDropped):
            await call.result()
        assert trio.current_time() == 1


async def test_await_completion_signal_reaches_waiting_child(autojump_clock: object) -> None:
    async def listener(ctx: ActorContext) -> float:
        await ctx.wait_cancel_requested()
        await trio.sleep(2)  # cleanup after the signal, still shielded
        return trio.current_time()

    async with open_supervisor("s") as sup:
        with trio.move_on_after(3) as scope:
            async with sup.open_actor("turn", "t") as turn:
                call = turn.call(
                    listener, kind="tool", name="l", policy=CancellationPolicy.AWAIT_COMPLETION
                )
                await call.result()
        assert scope.cancelled_caught
        assert call.value == 5
        assert trio.current_time() == 5


async def test_run_returns_value(autojump_clock: object) -> None:
    async def compute(ctx: ActorContext, x: int) -> int:
        await trio.sleep(1)
        return x * 2

    async with open_supervisor("s") as sup, sup.open_actor("turn", "t") as turn:
        for policy in CancellationPolicy:
            assert await turn.run(compute, 21, kind="tool", name="c", policy=policy) == 42
    assert not math.isnan(trio.current_time())


async def test_result_waits_are_checkpoints(autojump_clock: object) -> None:
    async def instant(ctx: ActorContext) -> int:
        return 7

    async with open_supervisor("s") as sup, sup.open_actor("turn", "t") as turn:
        call = turn.call(instant, kind="tool", name="i")
        with trio.testing.assert_checkpoints():
            assert await call.result() == 7


@pytest.mark.parametrize(
    "policy", [CancellationPolicy.AWAIT_COMPLETION, CancellationPolicy.FINISH_ONCE_STARTED]
)
async def test_owner_cancellation_signals_the_child_inside_cancel(
    policy: CancellationPolicy,
) -> None:
    # The policy is applied by the owner's abort function, inside CancelScope.cancel():
    # the child is signalled before any other task has run.
    async def listener(ctx: ActorContext) -> str:
        await ctx.start_point()
        await ctx.wait_cancel_requested()
        return "stopped"

    async with open_supervisor("s") as sup:
        with trio.fail_after(5), trio.CancelScope() as owner_scope:
            async with sup.open_actor("turn", "t") as turn:
                call = turn.call(listener, kind="tool", name="l", policy=policy)

                async def cancel_owner() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    assert not call.actor.cancel_requested
                    owner_scope.cancel()
                    assert call.actor.cancel_requested
                    assert call.actor.state is ActorState.FINISHING

                async with trio.open_nursery() as helper:
                    helper.start_soon(cancel_owner)
                    await call.result()
        assert owner_scope.cancelled_caught
        assert call.value == "stopped"


async def test_a_failing_cancel_callback_surfaces_from_result() -> None:
    class Boom(Exception):
        pass

    def explode() -> None:
        raise Boom("callback failed")

    release = trio.Event()

    async def listener(ctx: ActorContext) -> str:
        await ctx.start_point()
        ctx.on_cancel_requested(explode)
        await release.wait()  # shielded past its start point: ends only when released
        return "released"

    async with open_supervisor("s") as sup:
        with trio.fail_after(5), trio.CancelScope() as owner_scope:
            async with sup.open_actor("turn", "t") as turn:
                call = turn.call(
                    listener, kind="tool", name="l", policy=CancellationPolicy.FINISH_ONCE_STARTED
                )

                async def cancel_owner() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    owner_scope.cancel()  # must not raise here, inside Trio's cancel
                    release.set()  # (this task is cancelled too: no checkpoint before it)

                with pytest.RaisesGroup(Boom, allow_unwrapped=True, flatten_subgroups=True):
                    async with trio.open_nursery() as helper:
                        helper.start_soon(cancel_owner)
                        await call.result()


class _Steps(trio.abc.Instrument):
    """Records each step of the tasks it watches."""

    def __init__(self, watched: dict[trio.lowlevel.Task, str]) -> None:
        self.watched = watched
        self.log: list[str] = []

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task in self.watched:
            self.log.append(self.watched[task])


@pytest.mark.parametrize(
    "policy", [CancellationPolicy.AWAIT_COMPLETION, CancellationPolicy.FINISH_ONCE_STARTED]
)
async def test_a_cancelled_owner_is_not_scheduled_until_its_kept_child_ends(
    policy: CancellationPolicy,
) -> None:
    # The owner waits for the child anyway: it stays blocked (no step of its own) while
    # the signalled child finishes, then raises its cancellation in one step.
    watched: dict[trio.lowlevel.Task, str] = {}

    async def listener(ctx: ActorContext) -> str:
        watched[trio.lowlevel.current_task()] = "child"
        await ctx.start_point()
        await ctx.wait_cancel_requested()
        for _ in range(3):
            await trio.lowlevel.checkpoint()  # cleanup after the signal: several steps
        return "stopped"

    steps = _Steps(watched)
    async with open_supervisor("s") as sup:
        with trio.fail_after(5), trio.CancelScope() as owner_scope:
            async with sup.open_actor("turn", "t") as turn:
                call = turn.call(listener, kind="tool", name="l", policy=policy)

                async def cancel_owner() -> None:
                    await trio.testing.wait_all_tasks_blocked()
                    trio.lowlevel.add_instrument(steps)
                    owner_scope.cancel()

                watched[trio.lowlevel.current_task()] = "owner"
                async with trio.open_nursery() as helper:
                    helper.start_soon(cancel_owner)
                    try:
                        await call.result()
                    finally:
                        trio.lowlevel.remove_instrument(steps)
        assert owner_scope.cancelled_caught
        assert call.value == "stopped"
        assert steps.log == ["child"] * 4 + ["owner"]
