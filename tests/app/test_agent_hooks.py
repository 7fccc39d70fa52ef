"""Hooks and guardrails declared on an Agent reach every session the engine starts."""

from __future__ import annotations

import pytest

from emelex.agent import GuardrailTripped, Hook, ModelJudge
from emelex.app import Agent, AgentBuilder, Engine, Harness, InvalidHook
from emelex.testing import Say, ScriptedModel


def builder(model: ScriptedModel) -> AgentBuilder:
    return Agent.builder().name("a").instructions("Answer.").model(model)


async def test_a_judges_request_counts_into_the_session_budget() -> None:
    judge = ModelJudge("Answer BLOCK if rude, else PASS.")
    model = ScriptedModel([[Say("hello")], [Say("PASS")]])
    agent = builder(model).output_guardrail(judge).build()
    budget = Harness.worker(context_tokens=None, max_model_calls=10)
    async with Engine() as engine:
        session = await engine.create(agent).harness(budget).start()
        turn = await session.send_and_wait("hi")
        usage = session.usage
        context = await session.inspect()
    assert turn.response.text == "hello"
    assert usage is not None and usage.model_calls == 2  # the answer and the judge's
    assert context.hooks == ("Guardrails",)


async def test_an_agent_guardrail_trips_in_its_sessions() -> None:
    judge = ModelJudge("Answer BLOCK if rude, else PASS.")
    model = ScriptedModel([[Say("you fool")], [Say("BLOCK")]])
    agent = builder(model).output_guardrail(judge).build()
    async with Engine() as engine:
        session = await engine.create(agent).start()
        with pytest.raises(GuardrailTripped):
            await session.send_and_wait("hi")
        assert [m.role for m in session.history] == ["system"]


def test_the_builder_checks_hooks_and_guardrails() -> None:
    model = ScriptedModel([])
    with pytest.raises(InvalidHook, match="not a Hook"):
        builder(model).hook(object()).build()  # type: ignore[arg-type]
    with pytest.raises(InvalidHook, match="OutputGuardrail"):
        builder(model).output_guardrail(object()).build()  # type: ignore[arg-type]
    agent = builder(model).hook(Hook()).build()
    assert [hook.name for hook in agent.hooks] == ["Hook"]
