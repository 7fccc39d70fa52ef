"""Servers that ask back, with a real FastMCP server over stdio: elicitation answered
by a handler (checked against the server's schema), sampling on a model the host
names, and both cancelled with the call they serve."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio

from emelex.agent import AgentCancellation
from emelex.model import ToolCall
from emelex.runtime import open_supervisor
from emelex.tools import ToolInvocation, ToolOutput
from emelex.tools.mcp import (
    ElicitAccept,
    ElicitationAnswer,
    ElicitationRequest,
    ElicitCancel,
    ElicitDecline,
    InvalidMcpConfig,
    McpAskRefused,
    SamplingRequest,
    SamplingResult,
    open_mcp_connection,
)
from tests.tools.mcp.conftest import TEST_TIMEOUT, stdio_server


@attrs.define
class Answers:
    """Answers every question with ``answer``; waits forever when it is None."""

    answer: ElicitationAnswer | None
    asked: list[ElicitationRequest] = attrs.Factory(list)
    waiting: trio.Event = attrs.Factory(trio.Event)
    cancelled: bool = False

    async def elicit(self, request: ElicitationRequest) -> ElicitationAnswer:
        self.asked.append(request)
        if self.answer is not None:
            return self.answer
        self.waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            self.cancelled = True
            raise
        raise AssertionError("unreachable")


@attrs.define
class Sampler:
    refuse: bool = False
    seen: list[SamplingRequest] = attrs.Factory(list)

    async def sample(self, request: SamplingRequest) -> SamplingResult:
        self.seen.append(request)
        if self.refuse:
            raise McpAskRefused("not on this model", server=request.server)
        return SamplingResult("five words exactly here", "scripted-model")


def invocation(
    name: str, arguments: dict[str, Any], cancellation: AgentCancellation
) -> ToolInvocation:
    return ToolInvocation(ToolCall("call-1", name, arguments), cancellation, "turn", "session")


async def call(server: Any, name: str, arguments: dict[str, Any]) -> ToolOutput:
    async with open_supervisor("mcp-asks"), open_mcp_connection(server) as connection:
        return await connection.call_tool(name, arguments)


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (ElicitAccept({"confirm": True, "note": "go"}), "confirmed deploy (go)"),
        (ElicitAccept({"confirm": False}), "refused deploy ()"),
        (ElicitDecline(), "decline"),
        (ElicitCancel(), "cancel"),
        # Content outside the server's schema is never sent: the server sees cancel.
        (ElicitAccept({"confirm": "yes please"}), "cancel"),
    ],
)
async def test_an_elicitation_is_answered_by_the_handler(
    answer: ElicitationAnswer, expected: str
) -> None:
    answers = Answers(answer)
    with trio.fail_after(TEST_TIMEOUT):
        output = await call(stdio_server(elicitation=answers), "confirm", {"action": "deploy"})
    assert output.text == expected and not output.is_error
    (request,) = answers.asked
    assert (request.server, request.message) == ("srv", "Really deploy?")
    assert request.schema["properties"]["confirm"]["type"] == "boolean"


async def test_without_a_handler_the_server_cannot_ask() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        output = await call(stdio_server(), "confirm", {"action": "deploy"})
    assert output.is_error and "could not ask" in output.text


async def test_cancelling_the_call_cancels_its_question() -> None:
    answers = Answers(None)
    cancellation = AgentCancellation()
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("mcp-asks"):
            async with open_mcp_connection(stdio_server(elicitation=answers)) as connection:
                tool = connection.tool("srv__confirm")
                async with trio.open_nursery() as nursery:

                    async def cancel_once_asked() -> None:
                        await answers.waiting.wait()
                        cancellation.cancel()

                    nursery.start_soon(cancel_once_asked)
                    output = await tool.invoke(
                        invocation("srv__confirm", {"action": "deploy"}, cancellation)
                    )
                assert output.is_error and output.text.startswith("cancelled")
                assert answers.cancelled and len(connection.asks) == 0
                # The connection stays usable.
                assert (await connection.call_tool("echo", {"text": "still here"})).text == (
                    "still here"
                )


async def test_a_question_nobody_answers_times_out_as_cancel() -> None:
    answers = Answers(None)
    with trio.fail_after(TEST_TIMEOUT):
        server = stdio_server(elicitation=answers, ask_timeout=0.5)
        output = await call(server, "confirm", {"action": "deploy"})
    assert output.text == "cancel" and answers.cancelled


async def test_sampling_runs_on_the_handler() -> None:
    sampler = Sampler()
    with trio.fail_after(TEST_TIMEOUT):
        output = await call(stdio_server(sampling=sampler), "summarise", {"text": "long text"})
    assert output.text == "scripted-model: five words exactly here"
    (request,) = sampler.seen
    assert [(m.role, m.text) for m in request.messages] == [("user", "long text")]
    assert (request.system_prompt, request.max_tokens) == ("Summarise in five words.", 40)


async def test_a_refused_sampling_reaches_the_server_as_an_error() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        server = stdio_server(sampling=Sampler(refuse=True))
        output = await call(server, "summarise", {"text": "long text"})
    assert output.is_error and "not on this model" in output.text


async def test_without_a_sampling_handler_the_server_cannot_sample() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        output = await call(stdio_server(), "summarise", {"text": "x"})
    assert output.is_error and "could not sample" in output.text


def test_handlers_are_checked_in_the_configuration() -> None:
    with pytest.raises(InvalidMcpConfig, match="elicitation"):
        stdio_server(elicitation=object())
    with pytest.raises(InvalidMcpConfig, match="sampling"):
        stdio_server(sampling=lambda request: None)
