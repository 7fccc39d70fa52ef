"""Workers lost with ``kill -9``: approvals survive them, and a FINISH_ONCE_STARTED tool's
effect never happens twice (the next worker finishes the turn)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import attrs
import trio

from emelex.agent import AgentTurn, Approve
from emelex.temporal import PendingApproval, TemporalEngine, TurnNotRunning
from tests.temporal._agents import order
from tests.temporal._support import FAST, eventually, file_appears, queue, worker_processes

#: Kills of the kill test (EMELEX_TEMPORAL_KILLS=20 for the acceptance count).
KILLS = int(os.environ.get("EMELEX_TEMPORAL_KILLS", "3"))


async def _pending(engine: TemporalEngine, session_id: str) -> PendingApproval | None:
    try:
        pending = await engine.pending_approvals(session_id)
    except TurnNotRunning:
        return None  # the first workflow task has not run yet
    return pending[0] if pending else None


async def test_approval_answered_from_another_client_after_kill(
    temporal_address: str, tmp_path: Path
) -> None:
    task_queue = queue()
    settings = attrs.evolve(FAST, approvals="ask")
    result: list[AgentTurn] = []
    with worker_processes(temporal_address, task_queue, tmp_path) as workers:
        first = workers.spawn()
        async with TemporalEngine(
            temporal_address, task_queue=task_queue, settings=settings
        ) as engine:
            session = await engine.create().start()

            async def turn() -> None:
                result.append(await session.send_and_wait(order("guarded_append", line="x")))

            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(turn)
                    waiting = await eventually(lambda: _pending(engine, session.session_id))
                    assert waiting.tool == "guarded_append"
                    assert waiting.arguments == {"line": "x"}
                    workers.kill(first)
                    workers.spawn()  # a new worker process; the approval still waits
                    # Any client: a second engine knows only the session id.
                    async with TemporalEngine(temporal_address, task_queue=task_queue) as other:
                        again = await eventually(lambda: _pending(other, session.session_id))
                        # The same call still waits. ``since`` is the wait's workflow
                        # time: when the kill lands before the task that began the wait
                        # is recorded, the retried task begins it again, later.
                        assert attrs.evolve(again, since=waiting.since) == waiting
                        assert again.since >= waiting.since
                        await other.respond(session.session_id, waiting.call_id, Approve())
    (turn_result,) = result
    assert turn_result.response.text == "done: appended x"
    assert (tmp_path / "journal.txt").read_text() == "x\n"


async def test_kill_mid_tool_runs_the_effect_once(temporal_address: str, tmp_path: Path) -> None:
    task_queue = queue()
    journal, started = tmp_path / "journal.txt", tmp_path / "started.txt"
    answers: list[str] = []
    with worker_processes(temporal_address, task_queue, tmp_path, pause=60.0) as workers:
        current = workers.spawn()
        async with TemporalEngine(temporal_address, task_queue=task_queue, settings=FAST) as e:
            for kill in range(KILLS):
                session = await e.create().start()
                started.unlink(missing_ok=True)
                with trio.fail_after(120):
                    async with trio.open_nursery() as nursery:

                        async def turn(line: str = f"kill{kill}", session: Any = session) -> None:
                            answer = await session.send_and_wait(order("append_line", line=line))
                            answers.append(answer.response.text)

                        nursery.start_soon(turn)
                        await file_appears(started)
                        workers.kill(current)  # mid-tool: the effect is done, no result yet
                        current = workers.spawn()
    lines = journal.read_text().splitlines()
    assert lines == [f"kill{kill}" for kill in range(KILLS)]  # each effect exactly once
    assert len(answers) == KILLS
    assert all(answer.startswith("done: lost: the worker running this call") for answer in answers)


async def test_an_idempotent_tool_is_retried_after_a_kill(
    temporal_address: str, tmp_path: Path
) -> None:
    task_queue = queue()
    journal, started = tmp_path / "journal.txt", tmp_path / "started.txt"
    answers: list[str] = []
    with worker_processes(temporal_address, task_queue, tmp_path, pause=60.0) as workers:
        first = workers.spawn()
        async with TemporalEngine(temporal_address, task_queue=task_queue, settings=FAST) as e:
            session = await e.create().start()
            with trio.fail_after(120):
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        answer = await session.send_and_wait(order("idempotent_append", line="i"))
                        answers.append(answer.response.text)

                    nursery.start_soon(turn)
                    await file_appears(started)
                    workers.kill(first)
                    workers.spawn()
    # Declared idempotent: Temporal ran it again on the next worker, which answered.
    assert journal.read_text().splitlines() == ["i", "i"]
    assert answers == ["done: appended i"]


async def test_a_worker_process_stops_cleanly_on_sigterm(
    temporal_address: str, tmp_path: Path
) -> None:
    task_queue = queue()
    with worker_processes(temporal_address, task_queue, tmp_path) as workers:
        process = workers.spawn()
        async with TemporalEngine(temporal_address, task_queue=task_queue) as engine:
            session = await engine.create().start()
            with trio.fail_after(60):
                turn = await session.send_and_wait("hello")  # it serves
        assert turn.response.text == "hello"
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            code = await trio.to_thread.run_sync(process.wait)
    assert code == 0
