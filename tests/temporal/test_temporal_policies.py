"""Policies on Temporal: cancellation of a turn with a cooperative tool in flight, the
default denial, the authority drift check, and two workers sharing a task queue."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import trio

from emelex.agent import Deny, TurnCancelled
from emelex.model import TextPart
from emelex.temporal import (
    AuthorityDrift,
    NoPendingApproval,
    PendingApproval,
    TemporalEngine,
    TurnNotRunning,
    WorkerOptions,
    describe_session,
    open_worker,
)
from tests.temporal._agents import AppendLine, Guarded, WaitForCancel, build_session, order
from tests.temporal._support import FAST, eventually, file_appears, queue


async def test_cancel_waits_for_a_cooperative_tool(temporal_address: str, tmp_path: Path) -> None:
    started = tmp_path / "started.txt"
    worker_session = build_session(tmp_path, WaitForCancel(started))
    options = WorkerOptions(task_queue=queue(), heartbeat_interval=0.2)
    with trio.fail_after(60):
        async with (
            open_worker(worker_session, temporal_address, options=options),
            TemporalEngine(
                temporal_address, task_queue=options.task_queue, settings=FAST
            ) as engine,
        ):
            session = await engine.create().start()
            failure: list[TurnCancelled] = []

            async def turn() -> None:
                with pytest.raises(TurnCancelled) as caught:
                    await session.send_and_wait(order("wait_for_cancel"))
                failure.append(caught.value)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn)
                await file_appears(started)
                await engine.cancel(session.session_id)
    (cancelled,) = failure
    # A tool ran, so the turn is checkpointed with the tool's one result, not rolled back.
    assert cancelled.rolled_back is False
    assert [m.role for m in cancelled.checkpoint] == ["user", "assistant", "tool"]
    assert cancelled.checkpoint[-1].content == (TextPart("stopped early, cleanly"),)
    assert session.history[-3:] == cancelled.checkpoint


async def test_approval_is_denied_by_default(temporal_address: str, tmp_path: Path) -> None:
    journal = tmp_path / "journal.txt"
    options = WorkerOptions(task_queue=queue())
    with trio.fail_after(60):
        async with (
            open_worker(
                build_session(tmp_path, Guarded(journal)), temporal_address, options=options
            ),
            TemporalEngine(temporal_address, task_queue=options.task_queue) as engine,
        ):
            session = await engine.create().start()
            turn = await session.send_and_wait(order("guarded_append", line="no"))
    assert turn.response.text.startswith("done: denied: no approver is configured")
    assert not journal.exists()


async def test_a_drifted_worker_refuses_the_turn(temporal_address: str, tmp_path: Path) -> None:
    options = WorkerOptions(task_queue=queue())
    first = build_session(tmp_path, AppendLine(tmp_path / "a.txt"))
    with trio.fail_after(60):
        async with TemporalEngine(temporal_address, task_queue=options.task_queue) as engine:
            session = await engine.create().start()
            async with open_worker(first, temporal_address, options=options):
                await session.send_and_wait("hello")
            pinned = session.authority
            # The same queue, now served by a worker with one more tool: other authority.
            drifted = build_session(
                tmp_path, AppendLine(tmp_path / "a.txt"), Guarded(tmp_path / "b.txt")
            )
            async with open_worker(drifted, temporal_address, options=options):
                before = session.history
                with pytest.raises(AuthorityDrift):
                    await session.send_and_wait(order("append_line", line="x"))
    assert session.authority == pinned
    assert session.history == before  # rolled back: nothing ran
    assert not (tmp_path / "a.txt").exists()


async def test_two_workers_share_a_task_queue(temporal_address: str, tmp_path: Path) -> None:
    task_queue = queue()
    # One activity at a time each, and tools that take a while: both must take work.
    options = [
        WorkerOptions(task_queue=task_queue, max_concurrent_activities=1, identity=name)
        for name in ("a", "b")
    ]
    sessions = [
        build_session(tmp_path, AppendLine(tmp_path / f"{name}.txt", pause=0.3))
        for name in ("a", "b")
    ]
    lines = [f"line{i}" for i in range(6)]
    answers: list[str] = []
    with trio.fail_after(90):
        async with (
            open_worker(sessions[0], temporal_address, options=options[0]) as a,
            open_worker(sessions[1], temporal_address, options=options[1]) as b,
            TemporalEngine(temporal_address, task_queue=task_queue) as engine,
        ):
            assert a.digest == b.digest  # the same authority: either may run any task

            async def turn(line: str) -> None:
                session = await engine.create().start()
                answers.append(
                    (await session.send_and_wait(order("append_line", line=line))).response.text
                )

            async with trio.open_nursery() as nursery:
                for line in lines:
                    nursery.start_soon(turn, line)
    done = {name: (tmp_path / f"{name}.txt").read_text().splitlines() for name in ("a", "b")}
    assert sorted(done["a"] + done["b"]) == lines  # every effect once, on one worker
    assert done["a"] and done["b"]
    assert sorted(answers) == sorted(f"done: appended {line}" for line in lines)


async def test_respond_refuses_calls_that_do_not_wait(
    temporal_address: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.txt"
    options = WorkerOptions(task_queue=queue())
    settings = attrs.evolve(FAST, approvals="ask")
    answers: list[str] = []
    with trio.fail_after(60):
        async with (
            open_worker(
                build_session(tmp_path, Guarded(journal)), temporal_address, options=options
            ),
            TemporalEngine(
                temporal_address, task_queue=options.task_queue, settings=settings
            ) as engine,
        ):
            session = await engine.create().start()
            with pytest.raises(TurnNotRunning):
                await session.pending_approvals()  # no turn has started

            async def pending() -> PendingApproval | None:
                try:
                    waiting = await session.pending_approvals()
                except TurnNotRunning:
                    return None
                return waiting[0] if waiting else None

            async def turn() -> None:
                answer = await session.send_and_wait(order("guarded_append", line="x"))
                answers.append(answer.response.text)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn)
                waiting = await eventually(pending)
                with pytest.raises(NoPendingApproval):
                    await session.respond("not-a-call", Deny("no"))
                await session.respond(waiting.call_id, Deny("not today"))
                with pytest.raises((NoPendingApproval, TurnNotRunning)):
                    await session.respond(waiting.call_id, Deny("twice"))
    assert answers == ["done: denied: not today"]
    assert not journal.exists()


async def test_a_pinned_authority_is_checked_from_the_first_turn(
    temporal_address: str, tmp_path: Path
) -> None:
    expected = build_session(tmp_path, AppendLine(tmp_path / "a.txt"))
    served = build_session(tmp_path, AppendLine(tmp_path / "a.txt"), Guarded(tmp_path / "b.txt"))
    options = WorkerOptions(task_queue=queue())
    with trio.fail_after(60):
        async with (
            open_worker(served, temporal_address, options=options),
            TemporalEngine(temporal_address, task_queue=options.task_queue) as engine,
        ):
            session = await engine.create().pin(describe_session(expected)).start()
            with pytest.raises(AuthorityDrift):
                await session.send_and_wait("hello")
            right = await engine.create().pin(describe_session(served)).start()
            assert (await right.send_and_wait("hello")).response.text == "hello"


async def test_an_unanswered_approval_is_denied_at_its_timeout(
    temporal_address: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal.txt"
    options = WorkerOptions(task_queue=queue())
    settings = attrs.evolve(FAST, approvals="ask", approval_timeout=0.5)
    with trio.fail_after(60):
        async with (
            open_worker(
                build_session(tmp_path, Guarded(journal)), temporal_address, options=options
            ),
            TemporalEngine(
                temporal_address, task_queue=options.task_queue, settings=settings
            ) as engine,
        ):
            session = await engine.create().start()
            turn = await session.send_and_wait(order("guarded_append", line="late"))
    assert turn.response.text == "done: denied: no answer within 0.5 s"
    assert not journal.exists()
