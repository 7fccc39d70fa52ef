"""Synchronous entry points (app/_sync.py): they start Trio and refuse inside a loop."""

from __future__ import annotations

import asyncio
import threading

import attrs
import pytest
import trio
import trio.lowlevel

import emelex
from emelex import LoopAlreadyRunning, TypedTurn
from emelex.agent import ModelFailed
from emelex.app import Harness
from emelex.testing import Fail, Say

from .helpers import builder, scripted


@attrs.frozen
class City:
    name: str
    population: int


def test_agent_run_sync_runs_one_turn_and_cleans_up() -> None:
    model = scripted([Say("Hello there.")])
    agent = builder(model).build()
    turn = agent.run_sync("Hi")
    assert turn.response.text == "Hello there."
    assert [m.role for m in turn.messages] == ["user", "assistant"]
    assert model.completed_rounds == (0,)


def test_agent_run_sync_with_an_output_type() -> None:
    model = scripted([Say('{"name": "Oslo", "population": 709000}')])
    agent = builder(model).build()
    turn = agent.run_sync("Largest city of Norway?", output_type=City, harness=Harness.base())
    assert isinstance(turn, TypedTurn)
    assert turn.output == City("Oslo", 709000)


def test_agent_run_sync_raises_the_turns_error() -> None:
    agent = builder(scripted([Fail(RuntimeError("down"))])).build()
    with pytest.raises(ModelFailed, match="down"):
        agent.run_sync("Hi")


def test_run_sync_returns_the_functions_value() -> None:
    async def double(value: int) -> int:
        await trio.lowlevel.checkpoint()
        return value * 2

    assert emelex.run_sync(double, 21) == 42


async def test_run_sync_refuses_inside_trio() -> None:
    async def nothing() -> None:
        await trio.lowlevel.checkpoint()

    with pytest.raises(LoopAlreadyRunning, match=r"inside trio\.run"):
        emelex.run_sync(nothing)
    agent = builder(scripted([Say("x")])).build()
    with pytest.raises(LoopAlreadyRunning, match=r"Agent\.run_sync"):
        agent.run_sync("Hi")


def test_run_sync_refuses_inside_asyncio() -> None:
    model = scripted([Say("x")])
    agent = builder(model).build()
    caught: list[BaseException] = []

    async def notebook_cell() -> None:
        for attempt in (lambda: emelex.run_sync(trio.sleep, 0), lambda: agent.run_sync("Hi")):
            try:
                attempt()
            except LoopAlreadyRunning as exc:
                caught.append(exc)

    asyncio.run(notebook_cell())
    assert len(caught) == 2
    assert all("asyncio loop" in str(exc) for exc in caught)
    assert model.calls_made == 0


def test_run_sync_works_from_a_worker_thread_of_a_sync_program() -> None:
    # Only a loop running in *this* thread is refused.
    results: list[object] = []

    def worker() -> None:
        results.append(builder(scripted([Say("ok")])).build().run_sync("Hi").response.text)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(30)
    assert results == ["ok"]
