"""The OpenAI-compatible backend against a real HTTP server on loopback (hypercorn under
Trio) that streams normally and misbehaves on purpose."""

from __future__ import annotations

import gc
import json
import warnings
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from emelex import LimitExceeded
from emelex.model import (
    AgentModel,
    Client,
    Completed,
    GenerationEvent,
    GenerationOptions,
    GenerationRequest,
    InvalidRequest,
    InvalidResponse,
    Message,
    ModelError,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolDefinition,
    Usage,
    estimate_usage,
)
from emelex.model.openai import (
    ChunkTooLarge,
    ConnectionFailed,
    Disconnected,
    HTTPStatusError,
    MalformedChunk,
    OpenAIModel,
    RateLimited,
    ResponseTooLarge,
    ServerTokenCounter,
    StreamError,
    StreamStalled,
    TransportFailure,
)
from emelex.runtime import AgentCancellation

from .fault_server import CALL_ARGUMENTS, REASONING, SECOND_ARGUMENTS, TEXT, FaultServer

HELLO = GenerationRequest([Message.user("hello")])
ECHO = ToolDefinition(
    "echo", "Echo text", {"type": "object", "properties": {"text": {"type": "string"}}}
)


async def collect(model: AgentModel, request: GenerationRequest = HELLO) -> list[GenerationEvent]:
    with trio.fail_after(10):
        async with model.generate(request) as stream:
            return [event async for event in stream]


def texts(events: Sequence[GenerationEvent], kind: type[TextDelta | ReasoningDelta]) -> str:
    return "".join(event.text for event in events if isinstance(event, kind))


def check_contract(events: Sequence[GenerationEvent]) -> Completed:
    """Exactly one Completed, last, whose text and reasoning are the deltas joined."""
    assert sum(isinstance(event, Completed) for event in events) == 1
    completed = events[-1]
    assert isinstance(completed, Completed)
    response = completed.response
    assert texts(events, TextDelta) == response.text
    assert texts(events, ReasoningDelta) == (response.reasoning or "")
    return completed


# -- normal streams -------------------------------------------------------------------------
async def test_tool_call_deltas_reasoning_and_usage(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("tools"), "m") as model:
        async with model.generate(GenerationRequest([Message.user("hi")], tools=[ECHO])) as s:
            events = [event async for event in s]
        response = check_contract(events).response
        assert response.text == "".join(TEXT)
        assert response.reasoning == "".join(REASONING)
        assert [e.text for e in events if isinstance(e, ReasoningDelta)] == REASONING
        assert response.tool_calls == (
            ToolCall("call_abc", "echo", json.loads(CALL_ARGUMENTS)),
            ToolCall("call_def", "read", json.loads(SECOND_ARGUMENTS)),
        )
        assert response.finish_reason == "tool_calls"
        assert response.usage == Usage(31, 17)
        assert s.usage_reported and s.finish_reason == "tool_calls"
        assert s.response_id == "chatcmpl-fault" and s.served_model == "fault-model"
        assert s.status_code == 200
    body = fault_server.app.requests[-1]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "echo"


async def test_client_wrapper_and_plain_text(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("text"), "m") as model:
        client = Client(model)
        assert client.capabilities == model.capabilities
        events = await collect(client)
    response = check_contract(events).response
    assert response.text == "Hello, world!" and response.finish_reason == "stop"
    assert response.usage == Usage(5, 4)


async def test_no_usage_reported_gives_an_estimate(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("nousage"), "m") as model:
        async with model.generate(HELLO) as stream:
            events = [event async for event in stream]
        assert not stream.usage_reported
    response = check_contract(events).response
    # "hello" is 5 bytes (2 tokens) plus 4 for the message's framing; "plain" 5 bytes.
    assert response.usage == Usage(6, 2, estimated=True)
    assert response.usage == estimate_usage(HELLO, response)


async def test_a_failing_server_counter_falls_back_to_bytes_once(
    fault_server: FaultServer,
) -> None:
    """This server has no token-count endpoint (it answers an SSE stream there): the
    byte estimate is used, and the endpoint is not asked again."""
    async with OpenAIModel(fault_server.url("nousage"), "m", token_counter="server") as model:
        assert isinstance(model.token_counter, ServerTokenCounter)
        assert model.token_counter.url == fault_server.root + "/nousage/extras/tokenize/count"
        for _ in range(2):
            async with model.generate(HELLO) as stream:
                events = [event async for event in stream]
            assert check_contract(events).response.usage == Usage(6, 2, estimated=True)
    assert fault_server.app.paths.count("/nousage/extras/tokenize/count") == 1
    assert fault_server.app.requests[1] == {"input": "", "model": "m"}


class StuckCounter:
    """A tokenizer that never answers (a hung tokenize endpoint)."""

    def __init__(self) -> None:
        self.asked = trio.Event()

    async def count_tokens(self, text: str) -> int:
        self.asked.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_the_streams_cancellation_stops_a_count_in_progress(
    fault_server: FaultServer,
) -> None:
    counter = StuckCounter()
    cancellation = AgentCancellation()

    async def cancel_while_counting() -> None:
        await counter.asked.wait()
        cancellation.cancel()

    async with OpenAIModel(fault_server.url("nousage"), "m", token_counter=counter) as model:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_while_counting)
                async with model.generate(HELLO, cancellation=cancellation) as stream:
                    events = [event async for event in stream]
    # The answer had arrived in full; only the count was cut short: bytes instead.
    response = check_contract(events).response
    assert response.text == "plain" and response.usage == Usage(6, 2, estimated=True)


def test_token_counter_option_is_checked() -> None:
    with pytest.raises(InvalidRequest, match="token_counter must be"):
        OpenAIModel("http://127.0.0.1:1/v1", "m", token_counter="tokenizer")  # type: ignore[arg-type]


async def test_comments_ids_and_multiline_data(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("comments"), "m") as model:
        events = await collect(model)
    assert check_contract(events).response.text == "ab"


async def test_json_answer_to_a_stream_request(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("json"), "m") as model:
        events = await collect(model)
    response = check_contract(events).response
    assert (response.text, response.reasoning) == ("whole answer", "whole thought")
    assert response.tool_calls == (ToolCall("j1", "echo", {"a": 1}),)
    assert response.usage == Usage(3, 4)


async def test_finish_without_done_completes(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("finish-no-done"), "m") as model:
        events = await collect(model)
    assert check_contract(events).response.text == "ok"


async def test_request_headers_and_api_key(fault_server: FaultServer) -> None:
    seen: list[httpx.Request] = []

    async def record(request: httpx.Request) -> None:
        seen.append(request)

    async with httpx.AsyncClient(event_hooks={"request": [record]}) as http:
        model = OpenAIModel(
            fault_server.url("text"),
            "m",
            api_key="sk-secret",
            http_client=http,
            headers={"X-Trace": "t1"},
        )
        await collect(model)
        await model.aclose()  # does not close a client it was given
        assert not http.is_closed
    headers = seen[0].headers
    assert headers["authorization"] == "Bearer sk-secret"
    assert headers["x-trace"] == "t1" and headers["accept"] == "text/event-stream"
    assert seen[0].url.path == "/text/v1/chat/completions"
    assert "sk-secret" not in repr(model)


# -- HTTP status errors -----------------------------------------------------------------------
async def test_rate_limited_with_retry_after(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("ratelimit"), "m") as model:
        with pytest.raises(RateLimited) as caught:
            await collect(model)
    error = caught.value
    assert error.status == 429 and error.retry_after == 7.0
    assert error.message == "slow down" and "slow down" in error.body
    assert isinstance(error, HTTPStatusError) and isinstance(error, ModelError)


async def test_rate_limited_with_past_http_date(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("ratelimit-date"), "m") as model:
        with pytest.raises(RateLimited) as caught:
            await collect(model)
    assert caught.value.retry_after == 0.0 and caught.value.body == "too many"


async def test_server_error_status(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("error500"), "m") as model:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(model)
    assert caught.value.status == 500 and caught.value.message == "model crashed"
    assert not isinstance(caught.value, RateLimited)


async def test_endless_error_body_is_only_excerpted(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("huge-error"), "m") as model:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(model)
        await fault_server.wait_client_gone(1)
    assert caught.value.status == 503 and len(caught.value.body) <= 2000


async def test_not_found_path(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.root + "/nowhere/v1", "m") as model:
        with pytest.raises(HTTPStatusError):
            await collect(model)


async def test_a_404_from_a_base_url_without_v1_suggests_adding_it(
    fault_server: FaultServer,
) -> None:
    base = fault_server.root + "/needs-v1"
    async with OpenAIModel(base, "m") as model:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(model)
    error = caught.value
    assert error.status == 404 and error.message == "Not Found"
    assert error.hint is not None and f"try {base}/v1" in error.hint
    assert str(error).endswith(f"try {base}/v1)")
    # The suggestion is right: the same server answers under /v1.
    async with OpenAIModel(base + "/v1/", "m") as model:
        events = await collect(model)
    assert any(getattr(e, "text", None) == "found" for e in events)
    # A 404 from a versioned base URL (or another status) suggests nothing.
    async with OpenAIModel(base + "/v2", "m") as model:
        with pytest.raises(HTTPStatusError) as caught:
            await collect(model)
    assert caught.value.status == 404 and caught.value.hint is None
    assert "/v1" not in str(caught.value)


# -- malformed and oversized streams --------------------------------------------------------
async def test_malformed_json_chunk(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("malformed"), "m") as model:
        received: list[GenerationEvent] = []
        with pytest.raises(MalformedChunk) as caught:
            with trio.fail_after(10):
                async with model.generate(HELLO) as stream:
                    async for event in stream:
                        received.append(event)
    assert isinstance(caught.value, InvalidResponse)
    assert caught.value.excerpt.startswith("{not json")
    assert received == [TextDelta("ok")]
    assert isinstance(caught.value.__cause__, json.JSONDecodeError)


async def test_wrong_field_type_is_malformed(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("bad-shape"), "m") as model:
        with pytest.raises(MalformedChunk, match=r"delta\.content"):
            await collect(model)


async def test_invalid_tool_arguments_reach_the_caller_as_arguments_error(
    fault_server: FaultServer,
) -> None:
    async with OpenAIModel(fault_server.url("bad-args"), "m") as model:
        (call,) = check_contract(await collect(model)).response.tool_calls
    assert (call.id, call.name, call.arguments) == ("c1", "echo", {})
    assert call.arguments_error is not None
    assert "not valid JSON" in call.arguments_error
    assert json.dumps('{"text": ') in call.arguments_error


async def test_error_inside_the_stream(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("stream-error"), "m") as model:
        with pytest.raises(StreamError, match="server overloaded"):
            await collect(model)
        with pytest.raises(StreamError, match="bad gateway"):
            await collect(
                OpenAIModel(fault_server.url("error-event"), "m", http_client=model.http_client)
            )


async def test_oversized_line(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("oversized"), "m", max_line_bytes=8192) as model:
        with pytest.raises(ChunkTooLarge) as caught:
            await collect(model)
        await fault_server.wait_client_gone(1)
    assert isinstance(caught.value, LimitExceeded)
    assert caught.value.limit == "max_line_bytes" and caught.value.maximum == 8192


async def test_oversized_response(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("endless"), "m", max_response_bytes=20_000) as model:
        with pytest.raises(ResponseTooLarge) as caught:
            await collect(model)
        await fault_server.wait_client_gone(1)
    assert caught.value.limit == "max_response_bytes" and caught.value.actual is not None
    assert caught.value.actual > 20_000


# -- stalls and disconnects -------------------------------------------------------------------
@pytest.mark.parametrize("with_cancellation", [False, True])
@pytest.mark.parametrize("scenario", ["stall-headers", "stall-mid", "slow-headers"])
async def test_stall(fault_server: FaultServer, scenario: str, with_cancellation: bool) -> None:
    # Without an AgentCancellation a read has no scope of its own: the request's httpx
    # read timeout is the stall bound; with one, the read's own scope is. Same error.
    cancellation = AgentCancellation() if with_cancellation else None
    async with OpenAIModel(fault_server.url(scenario), "m", stall_timeout=0.3) as model:
        with trio.fail_after(10):
            with pytest.raises(StreamStalled) as caught:
                async with model.generate(HELLO, cancellation=cancellation) as stream:
                    async for _ in stream:
                        pass
        await fault_server.wait_client_gone(1)
    assert caught.value.timeout == 0.3 and isinstance(caught.value, TransportFailure)


async def test_disconnect_mid_stream(fault_server: FaultServer) -> None:
    received: list[GenerationEvent] = []
    async with OpenAIModel(fault_server.url("disconnect"), "m") as model:
        with pytest.raises(Disconnected) as caught:
            with trio.fail_after(10):
                async with model.generate(HELLO) as stream:
                    async for event in stream:
                        received.append(event)
    assert received == [TextDelta("Hello"), TextDelta(" wor")]
    assert isinstance(caught.value.__cause__, httpx.RemoteProtocolError)


async def test_clean_end_without_finish_is_a_disconnect(fault_server: FaultServer) -> None:
    async with OpenAIModel(fault_server.url("no-done"), "m") as model:
        with pytest.raises(Disconnected, match="before it finished"):
            await collect(model)


async def test_connection_refused() -> None:
    with trio.socket.socket() as sock:
        await sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        async with OpenAIModel(f"http://127.0.0.1:{port}/v1", "m", connect_timeout=2) as model:
            with pytest.raises(ConnectionFailed) as caught:
                await collect(model)
    assert isinstance(caught.value.__cause__, httpx.ConnectError)


# -- cancellation and the connection pool -----------------------------------------------------
def single_connection_client() -> httpx.AsyncClient:
    """One connection at most, and a short wait for it: a leaked one fails the next call."""
    return httpx.AsyncClient(
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=httpx.Timeout(5.0, pool=1.0),
    )


async def test_cancel_mid_stream_then_reuse_the_client(fault_server: FaultServer) -> None:
    async with single_connection_client() as http:
        endless = OpenAIModel(fault_server.url("endless"), "m", http_client=http)
        text = OpenAIModel(fault_server.url("text"), "m", http_client=http, connect_timeout=1)
        for round_ in range(3):
            received: list[GenerationEvent] = []
            with trio.fail_after(10), trio.CancelScope() as scope:
                async with endless.generate(HELLO) as stream:
                    async for event in stream:
                        received.append(event)
                        if len(received) == 3:
                            scope.cancel()
            assert scope.cancelled_caught and len(received) == 3
            await fault_server.wait_client_gone(round_ + 1)
            events = await collect(text)
            assert check_contract(events).response.text == "Hello, world!"


async def test_break_out_of_the_stream_then_reuse(fault_server: FaultServer) -> None:
    async with single_connection_client() as http:
        endless = OpenAIModel(fault_server.url("endless"), "m", http_client=http)
        with trio.fail_after(10):
            async with endless.generate(HELLO) as stream:
                async for event in stream:
                    assert isinstance(event, TextDelta)
                    break
        await fault_server.wait_client_gone(1)
        text = OpenAIModel(fault_server.url("text"), "m", http_client=http)
        assert check_contract(await collect(text)).response.text == "Hello, world!"


async def test_finished_streams_reuse_one_connection(fault_server: FaultServer) -> None:
    async with single_connection_client() as http:
        model = OpenAIModel(fault_server.url("tools"), "m", http_client=http)
        for _ in range(5):
            check_contract(await collect(model))
    # The rest of each body was read after [DONE], so one kept-alive connection served all.
    assert len(fault_server.app.clients) == 5 and len(set(fault_server.app.clients)) == 1


async def test_error_exits_release_the_connection(fault_server: FaultServer) -> None:
    async with single_connection_client() as http:
        for scenario, error in [
            ("malformed", MalformedChunk),
            ("ratelimit", RateLimited),
            ("disconnect", Disconnected),
        ]:
            with pytest.raises(error):
                await collect(OpenAIModel(fault_server.url(scenario), "m", http_client=http))
        text = OpenAIModel(fault_server.url("text"), "m", http_client=http)
        assert check_contract(await collect(text)).response.text == "Hello, world!"


async def test_agent_cancellation_ends_the_stream_as_cancelled(fault_server: FaultServer) -> None:
    cancellation = AgentCancellation()
    async with OpenAIModel(fault_server.url("endless"), "m") as model:
        events: list[GenerationEvent] = []
        with trio.fail_after(10):
            async with model.generate(HELLO, cancellation=cancellation) as stream:
                async for event in stream:
                    events.append(event)
                    if len(events) == 4:
                        cancellation.cancel()
        await fault_server.wait_client_gone(1)
    completed = check_contract(events)
    assert completed.response.finish_reason == "cancelled"
    assert len(events) == 5


async def test_agent_cancellation_while_waiting_for_headers(fault_server: FaultServer) -> None:
    cancellation = AgentCancellation()

    async def cancel_once_received() -> None:
        await fault_server.wait_requests(1)
        cancellation.cancel()

    async with OpenAIModel(fault_server.url("slow-headers"), "m") as model:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_once_received)
                async with model.generate(HELLO, cancellation=cancellation) as stream:
                    events = [event async for event in stream]
            await fault_server.wait_client_gone(1)
    assert len(events) == 1
    completed = check_contract(events)
    assert completed.response.finish_reason == "cancelled" and completed.response.text == ""
    assert stream.status_code is None


# -- request mapping seen by the server --------------------------------------------------------
async def test_request_body_reaches_the_server(fault_server: FaultServer) -> None:
    history = [
        Message.system("Be terse."),
        Message.user("Echo hi"),
        Message.assistant(tool_calls=[ToolCall("c1", "echo", {"text": "hi"})], reasoning="r"),
        Message.tool("c1", "hi"),
    ]
    options = GenerationOptions(max_tokens=9, temperature=0.5, top_p=0.9, seed=4, stop=["END"])
    request = GenerationRequest(history, tools=[ECHO], options=options)
    extra: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}
    async with OpenAIModel(fault_server.url("text"), "gpt-x", extra_body=extra) as model:
        await collect(model, request)
        assert fault_server.app.requests[-1] == json.loads(json.dumps(model.request_body(request)))
    body = fault_server.app.requests[-1]
    assert body["model"] == "gpt-x"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool"]
    assistant = body["messages"][2]
    assert assistant["content"] == "" and "reasoning_content" not in assistant
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"text": "hi"}
    assert body["messages"][3] == {"role": "tool", "tool_call_id": "c1", "content": "hi"}
    assert (body["max_tokens"], body["temperature"], body["top_p"]) == (9, 0.5, 0.9)
    assert (body["seed"], body["stop"]) == (4, ["END"])
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


async def test_no_async_generator_is_abandoned(fault_server: FaultServer) -> None:
    """Early exits stop httpx's body generators by cancelling their read, so none is
    left suspended for Trio to finalize (it would warn)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with single_connection_client() as http:
            endless = OpenAIModel(fault_server.url("endless"), "m", http_client=http)
            with trio.fail_after(10):
                async with endless.generate(HELLO) as stream:
                    async for _ in stream:
                        break
                with trio.CancelScope() as scope:
                    async with endless.generate(HELLO) as stream:
                        async for _ in stream:
                            scope.cancel()
                with pytest.raises(MalformedChunk):
                    await collect(OpenAIModel(fault_server.url("malformed"), "m", http_client=http))
                check_contract(
                    await collect(OpenAIModel(fault_server.url("text"), "m", http_client=http))
                )
            del stream
            gc.collect()
            await trio.testing.wait_all_tasks_blocked()
    abandoned = [w for w in caught if "garbage collected" in str(w.message)]
    assert not abandoned, [str(w.message) for w in abandoned]
