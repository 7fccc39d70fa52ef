"""Actor scopes, handshakes, registry, snapshots and the detached-work check."""

from __future__ import annotations

import threading

import pytest
import trio
import trio.testing

from emelex.runtime import (
    ActorContext,
    ActorKind,
    ActorStartupError,
    ActorState,
    DetachedWorkError,
    Supervisor,
    current_actor,
    open_supervisor,
)


async def test_current_is_innermost_and_default_outside() -> None:
    default = Supervisor.current()
    async with open_supervisor("outer") as outer:
        assert Supervisor.current() is outer
        async with open_supervisor("inner") as inner:
            assert Supervisor.current() is inner
        assert Supervisor.current() is outer
    assert Supervisor.current() is default


async def test_open_actor_registers_and_deregisters() -> None:
    async with open_supervisor("s") as sup:
        async with sup.open_actor(ActorKind.SESSION, "sess") as session:
            assert current_actor() is session.actor
            async with sup.open_actor("turn", "t1") as turn:
                assert turn.actor is not None
                assert turn.actor.parent is session.actor
                tree = sup.snapshot()
                assert [info.kind for info in tree.walk()] == ["session", "turn"]
                assert tree.roots[0].children[0].state is ActorState.RUNNING
            assert sup.snapshot().find("turn") == ()
        assert len(sup.snapshot()) == 0
        assert sup.live_actors == 0


async def test_start_handshake_returns_value_and_runs_in_parent_nursery(
    autojump_clock: object,
) -> None:
    seen: list[str] = []

    async def child(ctx: ActorContext, greeting: str) -> None:
        assert ctx.actor.state is ActorState.STARTING
        ctx.started(greeting.upper())
        assert ctx.actor.state is ActorState.RUNNING
        await trio.sleep(1)
        seen.append("finished")

    async with open_supervisor("s") as sup, sup.open_actor("session", "x") as actors:
        handle = await actors.start(child, "hello", kind=ActorKind.TOOL, name="c")
        assert handle.value == "HELLO"
        assert handle.state is ActorState.RUNNING
        assert handle.info().parent == actors.actor.id  # type: ignore[union-attr]
    assert seen == ["finished"]
    assert handle.state is ActorState.DONE


async def test_error_before_started_surfaces_unwrapped_in_caller() -> None:
    async def broken(ctx: ActorContext) -> None:
        raise KeyError("setup failed")

    async with open_supervisor("s") as sup:
        with pytest.raises(KeyError, match="setup failed"):
            async with sup.open_actor("session", "x") as actors:
                await actors.start(broken, kind="custom", name="b")
        assert sup.live_actors == 0


async def test_actor_ending_without_started_is_a_startup_error() -> None:
    async def forgetful(ctx: ActorContext) -> None:
        await trio.lowlevel.checkpoint()

    async with open_supervisor("s") as sup:
        with pytest.raises(ActorStartupError):
            async with sup.open_actor("session", "x") as actors:
                await actors.start(forgetful, kind="custom", name="f")


async def test_body_error_propagates_unwrapped_and_marks_failed() -> None:
    async with open_supervisor("s") as sup:
        with pytest.raises(ValueError, match="boom"):
            async with sup.open_actor("turn", "t") as turn:
                node = turn.actor
                raise ValueError("boom")
        assert node is not None
        assert node.state is ActorState.FAILED


async def test_failing_child_marks_failed_and_cancels_siblings() -> None:
    sibling_cancelled = trio.Event()

    async def sibling(ctx: ActorContext) -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            sibling_cancelled.set()
            raise

    async def failing(ctx: ActorContext) -> None:
        await trio.testing.wait_all_tasks_blocked()
        raise RuntimeError("child failed")

    async with open_supervisor("s") as sup:
        with pytest.raises(RuntimeError, match="child failed"):
            async with sup.open_actor("turn", "t") as turn:
                turn.start_soon(sibling, kind="tool", name="sib")
                failing_handle = turn.start_soon(failing, kind="tool", name="fail")
        assert sibling_cancelled.is_set()
        assert failing_handle.state is ActorState.FAILED
        assert sup.live_actors == 0


async def test_handle_cancel_stops_only_that_actor() -> None:
    async def forever(ctx: ActorContext) -> None:
        ctx.started()
        await trio.sleep_forever()

    async with open_supervisor("s") as sup, sup.open_actor("turn", "t") as turn:
        a = await turn.start(forever, kind="tool", name="a")
        b = await turn.start(forever, kind="tool", name="b")
        a.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert a.state is ActorState.DONE
        assert [info.name for info in sup.snapshot().find("tool")] == ["b"]
        b.cancel()


async def test_children_of_a_child_are_checked_and_visible(autojump_clock: object) -> None:
    async def grandparent(ctx: ActorContext) -> None:
        async with ctx.open_children() as children:
            children.start_soon(leaf, kind="model_job", name="leaf")
            ctx.started()

    async def leaf(ctx: ActorContext) -> None:
        await trio.sleep(5)

    async with open_supervisor("s") as sup, sup.open_actor("session", "s") as session:
        await session.start(grandparent, kind="turn", name="gp")
        tree = sup.snapshot()
        assert [info.kind for info in tree.walk()] == ["session", "turn", "model_job"]
        assert tree.find("model_job")[0].parent == tree.find("turn")[0].id


async def test_snapshot_is_immutable_copy() -> None:
    async with open_supervisor("s") as sup:
        async with sup.open_actor("session", "x"):
            snap = sup.snapshot()
        assert len(snap) == 1  # unchanged by later deregistration
        assert len(sup.snapshot()) == 0
        with pytest.raises(AttributeError):
            snap.roots[0].name = "changed"  # type: ignore[misc]


async def test_detached_registered_actor_is_detected() -> None:
    async with open_supervisor("s") as sup:
        with pytest.raises(DetachedWorkError) as caught:
            async with sup.open_actor("turn", "leaky"):
                # Back door: register a node nobody will ever close.
                sup.register(ActorKind.TOOL, "orphan")
        assert "orphan" in str(caught.value)
        assert caught.value.actors[0].startswith("tool 'orphan'")
        # The leak stays visible to diagnostics until it is cleaned up.
        (leaked,) = sup.snapshot().roots
        assert leaked.name == "orphan"
        node = next(iter(sup._roots))
        sup.deregister(node)


async def test_detached_thread_is_detected_and_named() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait, daemon=True)
    async with open_supervisor("s") as sup:
        with pytest.raises(DetachedWorkError, match="thread alive"):
            async with sup.open_actor("turn", "t"):
                node = sup.register(ActorKind.WORKER_THREAD, "stray")
                node.thread = thread
                thread.start()
        release.set()
        thread.join()
        sup.deregister(node)
    assert not thread.is_alive()


async def test_supervisor_exit_reports_leaks() -> None:
    with pytest.raises(DetachedWorkError, match="supervisor 'top'"):
        async with open_supervisor("top") as sup:
            sup.register("custom", "forgotten", parent=None)


async def test_top_level_actors_need_open_supervisor() -> None:
    from emelex.runtime import ActorError

    with pytest.raises(ActorError, match="open_supervisor"):
        _ = Supervisor("bare").actors


async def test_top_level_service_actor() -> None:
    stopped = trio.Event()

    async def service(ctx: ActorContext) -> None:
        ctx.started("ready")
        try:
            await trio.sleep_forever()
        finally:
            stopped.set()

    async with open_supervisor("s") as sup:
        handle = await sup.actors.start(service, kind=ActorKind.SERVICE, name="svc")
        assert handle.value == "ready"
        assert sup.snapshot().roots[0].kind == "service"
        handle.cancel()
    assert stopped.is_set()


async def test_custom_kind_must_be_non_empty() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        Supervisor("x").register("", "n")
