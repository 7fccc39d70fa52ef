"""``emelex attach``'s follower and invocations that committed nothing: printed where they
happened in the history it shows first and in the history it follows, with their prompt,
how they ended, when and which stop (against an in-process Host: the same HostAPI the
HostClient serves)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.cli._host_follow import Follower, settled_note
from emelex.contracts import QueueChanged, QueueSnapshot, SettledInvocation
from emelex.service import Host
from emelex.testing import Say, ScriptedModel, Wait


def helper() -> Agent:
    model = ScriptedModel(
        [[Say("first answer")], [Say("partial"), Wait(3600)], [Say("after the stop")]]
    )
    return (
        Agent.builder()
        .name("helper")
        .instructions("Help.")
        .model(model)
        .approver(DenyAll())
        .build()
    )


async def until(host: Host, session_id: str, holds: Any) -> QueueSnapshot:
    with trio.fail_after(30):
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, QueueChanged) and holds(update.queue):
                    return update.queue
    raise AssertionError("the watch ended")


async def stop_two(host: Host, session_id: str) -> tuple[SettledInvocation, SettledInvocation]:
    """Send "two" (it runs and waits) and "three" (queued); stop both."""
    two = await host.send(session_id, "two <b>bold</b>\x1b[31m", operation="send-2")
    await until(host, session_id, lambda q: any(e.state == "running" for e in q.entries))
    three = await host.send(session_id, "three", operation="send-3")
    assert (await host.stop(session_id, three.invocation_id, operation="stop-3")).outcome == (
        "removedFromQueue"
    )
    assert (await host.stop(session_id, two.invocation_id, operation="stop-2")).outcome == (
        "stopping"
    )
    queue = await until(host, session_id, lambda q: not q.entries and len(q.settled) == 2)
    first, second = queue.settled
    return first, second


def _follower(host: Host, session_id: str, shown: io.StringIO) -> Follower:
    # One stream for rows and notes: the order they are printed in is the test.
    return Follower(host, session_id, None, show_user=True, out=shown, err=shown)  # type: ignore[arg-type]


async def test_attach_shows_settled_invocations_in_place(tmp_path: Path) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "one", operation="send-1")
        await until(host, session.id, lambda q: not q.entries)

        # Following live: the stops are printed as they happen, after the rows before them.
        live = io.StringIO()
        follower = _follower(host, session.id, live)
        await follower.skip_to_end(keep=10)
        assert live.getvalue() == "user> one\nfirst answer\n"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follower.follow, lambda q: not q.entries and len(q.settled) == 2)
            three, two = await stop_two(host, session.id)
        assert (three.text, three.started, three.stop_operation) == ("three", False, "stop-3")
        assert (two.started, two.stop_operation, two.outcome) == (True, "stop-2", "stopped")
        assert two.finished_at_ms is not None
        marker_three = f"user> three\n  ⊘ {settled_note(three)}\n"
        # The prompt is printed safely: no terminal escape reaches the screen.
        marker_two = f"user> two <b>bold</b>\\x1b[31m\n  ⊘ {settled_note(two)}\n"
        assert live.getvalue() == "user> one\nfirst answer\n" + marker_three + marker_two
        assert "stopped before anything was committed · " in marker_two
        assert "(removed from the queue before it ran)" in marker_three
        assert marker_two.endswith(" · by stop stop-2\n")

        await host.send(session.id, "four", operation="send-4")
        await until(host, session.id, lambda q: not q.entries)
        whole = "user> one\nfirst answer\n" + marker_three + marker_two
        whole += "user> four\nafter the stop\n"

        # The history printed first: the markers sit among the rows, in place.
        history = io.StringIO()
        await _follower(host, session.id, history).skip_to_end(keep=10)
        assert history.getvalue() == whole
        # Only the markers among (and after) the rows shown are printed.
        tail = io.StringIO()
        await _follower(host, session.id, tail).skip_to_end(keep=2)
        assert tail.getvalue() == "user> four\nafter the stop\n"
        around = io.StringIO()
        await _follower(host, session.id, around).skip_to_end(keep=3)
        assert around.getvalue() == "first answer\n" + marker_three + marker_two + (
            "user> four\nafter the stop\n"
        )
        nothing = io.StringIO()
        await _follower(host, session.id, nothing).skip_to_end(keep=0)
        assert nothing.getvalue() == ""

    # After a restart the log alone gives the same.
    async with Host.open(tmp_path / "host", agents={"helper": helper()}) as host:
        again = io.StringIO()
        await _follower(host, session.id, again).skip_to_end(keep=10)
        assert again.getvalue() == whole
