"""Typed output on the native backend with real llama.cpp (a tiny random-weight GGUF):
the answer grammar makes the structured answer valid by construction, with and without
tools in the session."""

from __future__ import annotations

import enum
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Literal

import attrs
import pytest
import trio

from emelex import TypedTurn
from emelex.app import Engine, tool
from emelex.model import GenerationOptions, Reasoning
from emelex.model.llama import LlamaModel, choose_extra_buffers, write_tiny_gguf

from .helpers import builder


class Kind(enum.Enum):
    FILE = "file"
    DIRECTORY = "directory"


@attrs.frozen
class Entry:
    kind: Kind
    hidden: bool
    size: Literal["small", "large"]


@tool
async def stat(path: str) -> str:
    """Describe a path."""
    return f"{path}: a small file"


OPTIONS = GenerationOptions(max_tokens=160, temperature=0.0, reasoning=Reasoning.OFF)


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    trio.run(choose_extra_buffers)  # the buffer verdict, outside any test time limit
    return write_tiny_gguf(tmp_path_factory.mktemp("output") / "tiny.gguf")


@pytest.fixture
async def tiny(tiny_path: Path) -> AsyncIterator[LlamaModel]:
    async with LlamaModel(tiny_path, n_threads=1, n_threads_batch=1) as model:
        yield model


async def test_the_grammar_makes_the_typed_answer_valid(tiny: LlamaModel) -> None:
    agent = builder(tiny).options(OPTIONS).output_type(Entry, retries=0).build()
    async with Engine() as engine:
        session = await engine.create(agent).start()
        with trio.fail_after(120):
            turn = await session.send_and_wait("What is notes.txt?")
    # retries=0: the first answer had to be valid, and it is, whatever the weights say.
    assert isinstance(turn, TypedTurn)
    assert isinstance(turn.output, Entry)
    assert isinstance(turn.output.kind, Kind)
    assert len(turn.turns) == 1


async def test_with_tools_the_answer_turn_forbids_calls_and_is_valid(tiny: LlamaModel) -> None:
    agent = builder(tiny).options(OPTIONS).tool(stat).build()
    async with Engine() as engine:
        session = await engine.create(agent).start()
        session.agent_session.max_rounds = 3
        with trio.fail_after(180):
            turn = await session.send_and_wait(
                "What is notes.txt?", output_type=list[Literal["a", "b"]], output_retries=0
            )
        history = session.history
    assert all(item in ("a", "b") for item in turn.output)
    # The random weights do not answer in JSON freely: the answer turn (no tool calls,
    # the answer schema) followed the free turn and was valid by construction.
    assert len(turn.turns) == 2
    last = turn.turns[-1]
    assert last.response.tool_calls == ()
    assert history[-1].role == "assistant"
    assert history[-2].role == "user"
