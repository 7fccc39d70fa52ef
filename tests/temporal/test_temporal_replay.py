"""Determinism guard: recorded turn histories replay with Temporal's Replayer, and a turn
core that decides differently fails the replay."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from emelex.agent import TurnCore, TurnPhase
from emelex.temporal import TemporalEngine, TurnWorkflow, WorkerOptions, open_worker, workflow_id
from emelex.temporal._bridge import open_asyncio_thread
from emelex.temporal._worker import connect, workflow_runner
from emelex.testing import Call, Say, ScriptedModel
from tests.temporal._agents import AppendLine, build_session
from tests.temporal._support import queue

#: A tool round recorded on a dev server (tests/temporal/record_history.py writes it).
RECORDED = Path(__file__).parent / "histories" / "tool_round.json"


def _replayer() -> Replayer:
    return Replayer(workflows=[TurnWorkflow], workflow_runner=workflow_runner())


def _without_tools(self: TurnCore) -> tuple[list[Any], list[Any]]:
    """A changed decision: the round's calls are ignored and the turn ends."""
    self.phase = TurnPhase.FINAL
    return [], []


async def _replay(history: WorkflowHistory) -> None:
    async with open_asyncio_thread() as aio:
        await aio.run(lambda: _replayer().replay_workflow(history))


async def record_tool_round(address: str, workspace: Path) -> WorkflowHistory:
    model = ScriptedModel([[Call("append_line", {"line": "one"})], [Say("all done")]])
    session = build_session(workspace, AppendLine(workspace / "journal.txt"), model=model)
    options = WorkerOptions(task_queue=queue())
    with trio.fail_after(60):
        async with (
            open_worker(session, address, options=options),
            TemporalEngine(address, task_queue=options.task_queue) as engine,
        ):
            remote = await engine.create().start()
            await remote.send_and_wait("append one")
        async with open_asyncio_thread() as aio:
            client = await aio.run(lambda: connect(address))
            handle = client.get_workflow_handle(workflow_id(remote.session_id))
            return await aio.run(handle.fetch_history)


async def test_live_history_replays_and_a_changed_core_fails(
    temporal_address: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = await record_tool_round(temporal_address, tmp_path)
    await _replay(history)
    monkeypatch.setattr(TurnCore, "end_round", _without_tools)
    with pytest.raises(NondeterminismError):
        await _replay(history)


async def test_recorded_history_replays(monkeypatch: pytest.MonkeyPatch) -> None:
    history = WorkflowHistory.from_json("recorded", RECORDED.read_text())
    await _replay(history)
    monkeypatch.setattr(TurnCore, "end_round", _without_tools)
    with pytest.raises(NondeterminismError):
        await _replay(history)
