"""Shared helpers for application-layer tests (imported as ``from .helpers import``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import trio

from emelex.agent import AgentEvent, ToolCompleted, TurnCompleted, TurnFailed
from emelex.app import Agent, AgentBuilder, Session
from emelex.model import Message, TextPart
from emelex.testing import ScriptedModel, Step
from emelex.tools import ToolOutput


def text_of(message: Message) -> str:
    return "".join(part.text for part in message.content if isinstance(part, TextPart))


def scripted(*rounds: Sequence[Step]) -> ScriptedModel:
    return ScriptedModel([list(r) for r in rounds])


def builder(model: Any, instructions: str = "Be helpful.") -> AgentBuilder:
    return Agent.builder().name("tester").instructions(instructions).model(model)


async def run_collecting(session: Session, text: str) -> tuple[Any, list[AgentEvent]]:
    """Run one turn while a concurrent task consumes its events (up to the turn's end)."""
    events: list[AgentEvent] = []
    result: list[Any] = []
    async with session.events() as stream, trio.open_nursery() as nursery:

        async def consume() -> None:
            async for event in stream:
                events.append(event)
                if isinstance(event, TurnCompleted | TurnFailed):
                    return

        nursery.start_soon(consume)
        result.append(await session.send_and_wait(text))
    return result[0], events


def outputs(events: Sequence[AgentEvent]) -> list[ToolOutput]:
    return [e.output for e in events if isinstance(e, ToolCompleted)]
