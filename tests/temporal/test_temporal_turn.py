"""A tool round on a real Temporal server: the workflow's result is the AgentTurn the
in-process session commits for the same model and tools."""

from __future__ import annotations

import re
from pathlib import Path

import trio

from emelex.agent import AgentEvent, AgentTurn, AnswerDelta
from emelex.temporal import TemporalEngine, WorkerOptions, free_port, open_worker
from emelex.testing import Call, Say, ScriptedModel
from tests.temporal._agents import AppendLine, build_session

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def _script() -> ScriptedModel:
    return ScriptedModel([[Call("append_line", {"line": "one"})], [Say("all done")]])


def _shape(turn: AgentTurn | tuple[object, ...]) -> str:
    """The turn with its harness-made ids replaced by their order of appearance."""
    value = turn if isinstance(turn, tuple) else (turn.response, turn.messages, turn.usage)
    text = repr(value)
    ids: dict[str, str] = {}
    return UUID.sub(lambda m: ids.setdefault(m.group(), f"id{len(ids)}"), text)


def queue() -> str:
    return f"q{free_port()}"


async def test_tool_round_commits_the_in_process_turn(
    temporal_address: str, tmp_path: Path
) -> None:
    local = build_session(tmp_path, AppendLine(tmp_path / "local.txt"), model=_script())
    expected = await local.run("append one")
    remote = build_session(tmp_path, AppendLine(tmp_path / "remote.txt"), model=_script())
    options = WorkerOptions(task_queue=queue())
    with trio.fail_after(60):
        async with open_worker(remote, temporal_address, options=options):
            async with TemporalEngine(temporal_address, task_queue=options.task_queue) as engine:
                session = await engine.create().start()
                turn = await session.send_and_wait("append one")
    assert isinstance(turn, AgentTurn)
    assert _shape(turn) == _shape(expected)
    assert (tmp_path / "remote.txt").read_text() == "one\n"
    assert turn.rounds == expected.rounds == 2
    assert _shape(session.history) == _shape(local.history)


async def test_deltas_reach_the_worker_side_channel(temporal_address: str, tmp_path: Path) -> None:
    model = ScriptedModel([[Say("Hel"), Say("lo")]])
    events: list[tuple[str, AgentEvent]] = []
    options = WorkerOptions(task_queue=queue())
    worker = build_session(tmp_path, model=model)
    with trio.fail_after(60):
        async with (
            open_worker(
                worker,
                temporal_address,
                options=options,
                on_event=lambda s, e: events.append((s, e)),
            ),
            TemporalEngine(temporal_address, task_queue=options.task_queue) as engine,
        ):
            session = await engine.create().start()
            turn = await session.send_and_wait("hi")
    deltas = [event for sid, event in events if sid == session.session_id]
    assert [d.text for d in deltas if isinstance(d, AnswerDelta)] == ["Hel", "lo"]
    assert all(d.turn_id == turn.turn_id for d in deltas if isinstance(d, AnswerDelta))
    assert turn.response.text == "Hello"
