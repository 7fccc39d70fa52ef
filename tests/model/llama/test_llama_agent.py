"""End to end: an AgentSession on Client.llama with the tiny model and a grammar-constrained
tool; cancellation at random moments leaves no job, actor or thread behind."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import jsonschema
import pytest
import trio

from emelex.agent import (
    AgentCancellation,
    AgentError,
    AgentSession,
    RoundLimitExceeded,
    TurnCancelled,
)
from emelex.model import Client, GenerationOptions
from emelex.runtime import ActorKind, open_supervisor
from emelex.testing import ScriptedTool

SCHEMA = {
    "type": "object",
    "properties": {"key": {"type": "string", "maxLength": 8}},
    "required": ["key"],
    "additionalProperties": False,
}


def session_on(client: Client, workspace: Path, tool: ScriptedTool) -> AgentSession:
    return (
        AgentSession.builder(client, workspace)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tool(tool)
        # Every answer is a call (tool_choice="required"): the round limit ends the turn
        # after two committed tool rounds, which are then checkpointed. (A message
        # ceiling no longer ends it: requests are fitted under the ceilings.)
        .max_rounds(2)
        .options(GenerationOptions(max_tokens=256, temperature=0.0))
        .build()
    )


async def test_a_tool_round_on_the_tiny_model(tiny_model: Path, tmp_path: Path) -> None:
    tool = ScriptedTool("lookup", schema=SCHEMA)
    client = Client.llama(tiny_model, n_ctx=2048, n_threads=1, tool_choice="required")
    with trio.fail_after(120):
        async with open_supervisor("llama-e2e"), client:
            with session_on(client, tmp_path, tool) as session:
                with pytest.raises(RoundLimitExceeded) as caught:
                    await session.run("look something up")
                assert caught.value.rolled_back is False
                history = session.history
                assert [m.role for m in history[:2]] == ["user", "assistant"]
                calls = [call for message in history for call in message.tool_calls]
                results = [m for m in history if m.role == "tool"]
                assert calls
                assert len(results) == len(calls)  # every call answered exactly once
                for message in history:
                    for call in message.tool_calls:
                        assert call.name == "lookup"
                        jsonschema.validate(call.arguments, SCHEMA)  # valid by construction
                assert len(tool.started) == len(calls)  # each valid call ran once
                assert tool.finished == tool.started


async def test_random_cancellation_leaves_nothing_behind(tiny_model: Path, tmp_path: Path) -> None:
    rng = random.Random(7)
    client = Client.llama(tiny_model, n_ctx=2048, n_threads=1, tool_choice="required")
    outcomes: list[str] = []
    with trio.fail_after(180):
        async with open_supervisor("llama-cancel") as supervisor, client:
            for _ in range(8):
                tool = ScriptedTool("lookup", schema=SCHEMA)
                with session_on(client, tmp_path, tool) as session:
                    cancellation = AgentCancellation()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(_cancel_later, cancellation, rng.uniform(0, 0.08))
                        try:
                            await session.run("look it up", cancellation=cancellation)
                        except TurnCancelled:
                            outcomes.append("cancelled")
                        except AgentError as exc:
                            outcomes.append(type(exc).__name__)
                        nursery.cancel_scope.cancel()
                # Only the model's own worker thread remains registered between turns.
                kinds = [info.kind for info in supervisor.snapshot().walk()]
                assert kinds == [ActorKind.WORKER_THREAD.value]
    assert "cancelled" in outcomes
    assert not [t for t in threading.enumerate() if t.name.startswith("emelex-worker")]


async def _cancel_later(cancellation: AgentCancellation, delay: float) -> None:
    await trio.sleep(delay)
    cancellation.cancel()


async def test_consumer_failure_waits_for_the_native_job(tiny_model: Path, tmp_path: Path) -> None:
    from emelex.agent import AgentEvent, AnswerDelta, EventConsumerError

    def fail_on_answer(event: AgentEvent) -> None:
        if isinstance(event, AnswerDelta):
            raise RuntimeError("consumer gave up")

    client = Client.llama(tiny_model, n_ctx=2048, n_threads=1)
    with trio.fail_after(120):
        async with open_supervisor("llama-consumer") as supervisor, client:
            builder = (
                AgentSession.builder(client, tmp_path)
                .include_file_tools(False)
                .include_shell_tool(False)
                .options(GenerationOptions(max_tokens=200, temperature=0.0))
            )
            with builder.build() as session:
                with pytest.raises(EventConsumerError) as caught:
                    await session.run("say something", on_event=fail_on_answer)
                assert caught.value.rolled_back
                # The job has left the worker: nothing but the worker thread is registered.
                kinds = [info.kind for info in supervisor.snapshot().walk()]
                assert kinds == [ActorKind.WORKER_THREAD.value]
                # The model is still usable for the next turn.
                turn = await session.run("again")
                assert turn.response.usage.output_tokens > 0
