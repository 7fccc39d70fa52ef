"""Model retries, limits and interruption on Temporal: a model round retries on transport
errors only (usage counted once), the round and token limits stop a turn before the next
activity starts, and an INTERRUPTIBLE tool is interrupted by cancellation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from emelex.agent import AgentSession, TurnCancelled
from emelex.model import TextPart, Usage
from emelex.model.openai import ConnectionFailed
from emelex.temporal import (
    RemoteTurnFailed,
    SessionSettings,
    TemporalEngine,
    TemporalSession,
    WorkerOptions,
    open_worker,
)
from emelex.testing import Call, Fail, Say, ScriptedModel
from tests.temporal._agents import AppendLine, Interruptible, build_session, order
from tests.temporal._support import FAST, file_appears, queue


@asynccontextmanager
async def served(
    address: str, session: AgentSession, settings: SessionSettings = FAST
) -> AsyncIterator[TemporalSession]:
    options = WorkerOptions(task_queue=queue(), heartbeat_interval=0.2)
    with trio.fail_after(60):
        async with (
            open_worker(session, address, options=options),
            TemporalEngine(address, task_queue=options.task_queue, settings=settings) as engine,
        ):
            yield await engine.create().start()


async def test_transport_error_retries_and_usage_counts_once(
    temporal_address: str, tmp_path: Path
) -> None:
    model = ScriptedModel([[Fail(ConnectionFailed("refused"))], [Say("hi")]])
    async with served(temporal_address, build_session(tmp_path, model=model)) as session:
        turn = await session.send_and_wait("hello")
    assert turn.response.text == "hi"
    assert model.failed_rounds == (0,) and model.completed_rounds == (1,)
    assert turn.usage == Usage(2, 1)  # the retried attempt's round only


async def test_other_model_errors_fail_without_retry(temporal_address: str, tmp_path: Path) -> None:
    model = ScriptedModel([[Fail(ValueError("boom"))], [Say("never")]])
    async with served(temporal_address, build_session(tmp_path, model=model)) as session:
        with pytest.raises(RemoteTurnFailed) as caught:
            await session.send_and_wait("hello")
    assert caught.value.kind == "ModelFailed" and "boom" in str(caught.value)
    assert caught.value.rolled_back is True
    assert model.calls_made == 1
    assert session.history == (session.history[0],)  # only the agent's system prompt


def _one_tool_round() -> ScriptedModel:
    return ScriptedModel([[Call("append_line", {"line": "x"})], [Say("unreachable")]])


async def test_round_limit_stops_before_the_next_model_round(
    temporal_address: str, tmp_path: Path
) -> None:
    model = _one_tool_round()
    worker = build_session(tmp_path, AppendLine(tmp_path / "j.txt"), model=model, max_rounds=1)
    async with served(temporal_address, worker) as session:
        with pytest.raises(RemoteTurnFailed) as caught:
            await session.send_and_wait("go")
    assert caught.value.kind == "RoundLimitExceeded"
    assert model.calls_made == 1  # the second round's activity never started
    assert caught.value.rolled_back is False  # the tool ran: its batch is checkpointed
    assert [m.role for m in caught.value.checkpoint] == ["user", "assistant", "tool"]


async def test_token_limit_stops_before_the_next_model_round(
    temporal_address: str, tmp_path: Path
) -> None:
    model = _one_tool_round()
    worker = build_session(tmp_path, AppendLine(tmp_path / "j.txt"), model=model)
    settings = attrs.evolve(FAST, max_turn_tokens=3)
    async with served(temporal_address, worker, settings) as session:
        with pytest.raises(RemoteTurnFailed) as caught:
            await session.send_and_wait("go")
    assert caught.value.kind == "TokenLimitExceeded"
    assert model.calls_made == 1


async def test_cancel_interrupts_an_interruptible_tool(
    temporal_address: str, tmp_path: Path
) -> None:
    started = tmp_path / "started.txt"
    tool = Interruptible(started)
    failure: list[Any] = []
    async with served(temporal_address, build_session(tmp_path, tool)) as session:

        async def turn() -> None:
            with pytest.raises(TurnCancelled) as caught:
                await session.send_and_wait(order("long_job"))
            failure.append(caught.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            await file_appears(started)
            await session.cancel()
        with trio.fail_after(10):  # TRY_CANCEL: the workflow does not wait for it
            await tool.interrupted.wait()
    (cancelled,) = failure
    assert cancelled.rolled_back is False
    (part,) = cancelled.checkpoint[-1].content
    assert isinstance(part, TextPart) and part.text.startswith("interrupted:")
