"""A scripted OpenAI-compatible server for fault tests: a raw ASGI app served by hypercorn
under Trio, on loopback, in the test's own process.

The first path segment picks the scenario: ``{base}/<scenario>/v1/chat/completions``.
Every request body is recorded; streaming handlers that wait for the client to go away
record that too, so tests can prove a response was really closed.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import trio
from hypercorn.config import Config
from hypercorn.trio import serve

Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish: str | None = None,
    usage: dict[str, int] | None = None,
    choices: bool = True,
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` object."""
    body: dict[str, Any] = {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "fault-model",
        "choices": (
            [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
        ),
    }
    if usage is not None:
        body["usage"] = usage
    return body


def event(data: dict[str, Any] | str, *, newline: bytes = b"\n") -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return b"data: " + text.encode() + newline + newline


DONE = b"data: [DONE]\n\n"

REASONING = ["The user ", "wants an echo."]
TEXT = ["Calling ", "the tool", "."]
CALL_ARGUMENTS = '{"text": "hi there", "n": 2}'
SECOND_ARGUMENTS = '{"path": "a.txt"}'


def tool_call_stream() -> list[bytes]:
    """A normal stream: reasoning, text, two tool calls whose deltas are split across
    chunks (and interleaved), finish_reason, usage, [DONE]. Some events are cut in the
    middle of a line and some use CRLF, so the byte boundaries are awkward too."""
    first, second = CALL_ARGUMENTS, SECOND_ARGUMENTS
    parts = [
        event(chunk({"role": "assistant", "content": None})),
        *(event(chunk({"reasoning_content": piece})) for piece in REASONING),
        *(event(chunk({"content": piece}), newline=b"\r\n") for piece in TEXT),
        event(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "call_abc",
                            "type": "function",
                            "function": {"name": "echo", "arguments": ""},
                        }
                    ]
                }
            )
        ),
        event(chunk({"tool_calls": [{"index": 0, "function": {"arguments": first[:7]}}]})),
        event(
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "call_def",
                            "type": "function",
                            "function": {"name": "read", "arguments": second[:5]},
                        }
                    ]
                }
            )
        ),
        event(chunk({"tool_calls": [{"index": 0, "function": {"arguments": first[7:19]}}]})),
        event(chunk({"tool_calls": [{"index": 1, "function": {"arguments": second[5:]}}]})),
        event(chunk({"tool_calls": [{"index": 0, "function": {"arguments": first[19:]}}]})),
        event(chunk(finish="tool_calls")),
        event(chunk(usage={"prompt_tokens": 31, "completion_tokens": 17}, choices=False)),
        DONE,
    ]
    data = b"".join(parts)
    # Re-cut the bytes at awkward places (inside "data:", inside JSON, between CR and LF).
    cuts = [3, 50, 51, 52, 140, 333, 334, 700, 701, 1000, len(data) - 3]
    pieces, start = [], 0
    for cut in (c for c in cuts if 0 < c < len(data)):
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return pieces


def text_stream(words: list[str], *, usage: bool = True) -> list[bytes]:
    parts = [event(chunk({"role": "assistant"}))]
    parts += [event(chunk({"content": word})) for word in words]
    parts.append(event(chunk(finish="stop")))
    if usage:
        parts.append(event(chunk(usage={"prompt_tokens": 5, "completion_tokens": len(words)})))
    parts.append(DONE)
    return parts


class FaultApp:
    """The ASGI application (see the module docs)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.clients: list[tuple[str, int]] = []
        self.client_gone = 0
        self.gone_event = trio.Event()
        self.request_event = trio.Event()

    def _gone(self) -> None:
        self.client_gone += 1
        self.gone_event.set()
        self.gone_event = trio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.paths.append(scope["path"])
        self.clients.append(tuple(scope["client"]))
        self.requests.append(json.loads(body) if body else {})
        self.request_event.set()
        self.request_event = trio.Event()
        scenario = scope["path"].strip("/").split("/")[0]
        handler = getattr(self, "scenario_" + scenario.replace("-", "_"))
        await handler(self.requests[-1], receive, send)

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    async def start(send: Send, status: int = 200, headers: Any = None) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": headers or SSE_HEADERS}
        )

    @staticmethod
    async def body(send: Send, data: bytes, *, more: bool = True) -> None:
        await send({"type": "http.response.body", "body": data, "more_body": more})

    async def stream(self, send: Send, parts: list[bytes]) -> None:
        await self.start(send)
        for part in parts:
            await self.body(send, part)
        await self.body(send, b"", more=False)

    async def wait_gone(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._gone()

    async def until_gone(self, receive: Receive, produce: Callable[[], Awaitable[None]]) -> None:
        """Run ``produce`` (an endless sender) until the client disconnects."""
        async with trio.open_nursery() as nursery:

            async def watch() -> None:
                await self.wait_gone(receive)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch)
            await produce()

    # -- scenarios ---------------------------------------------------------------------------
    async def scenario_tools(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        await self.stream(send, tool_call_stream())

    async def scenario_text(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        await self.stream(send, text_stream(["Hello", ", ", "world", "!"]))

    async def scenario_needs_v1(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """Like a real server: chat completions live under ``/v1`` only; elsewhere 404."""
        if self.paths[-1] != "/needs-v1/v1/chat/completions":
            await self.start(send, 404, [(b"content-type", b"application/json")])
            body = b'{"detail": "Not Found"}'
            await self.body(send, body, more=False)
            return
        await self.stream(send, text_stream(["found", " it"]))

    async def scenario_nousage(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        await self.stream(send, text_stream(["plain"], usage=False))

    async def scenario_agent(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        """Round 1 calls ``echo``; once a tool result is in the conversation, answers."""
        messages = request["messages"]
        if messages[-1]["role"] == "tool":
            result = messages[-1]["content"]
            await self.stream(send, text_stream(["The tool said: ", result]))
            return
        parts = [
            event(chunk({"role": "assistant", "reasoning_content": "I should echo."})),
            event(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "srv_1",
                                "type": "function",
                                "function": {"name": "echo", "arguments": '{"te'},
                            }
                        ]
                    }
                )
            ),
            event(chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'xt": "hi"}'}}]})),
            event(chunk(finish="tool_calls")),
            event(chunk(usage={"prompt_tokens": 12, "completion_tokens": 8}, choices=False)),
            DONE,
        ]
        await self.stream(send, parts)

    async def scenario_agent_retry(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """Round 1 calls ``echo`` with arguments that are not JSON; once a result is in
        the conversation, calls it properly; after the second result, answers with it."""
        results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        if len(results) >= 2:
            await self.stream(send, text_stream(["The tool said: ", results[-1]]))
            return
        arguments = '{"text": "hi"' if not results else '{"text": "hi"}'
        call = {"index": 0, "id": "srv", "function": {"name": "echo", "arguments": arguments}}
        parts = [event(chunk({"tool_calls": [call]})), event(chunk(finish="tool_calls")), DONE]
        await self.stream(send, parts)

    async def scenario_ratelimit(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"7")]
        await self.start(send, 429, headers)
        error = {"error": {"message": "slow down", "type": "rate_limit"}}
        await self.body(send, json.dumps(error).encode(), more=False)

    async def scenario_ratelimit_date(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        headers = [(b"retry-after", b"Wed, 21 Oct 2015 07:28:00 GMT")]
        await self.start(send, 429, headers)
        await self.body(send, b"too many", more=False)

    async def scenario_error500(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.start(send, 500, [(b"content-type", b"application/json")])
        error = {"error": {"message": "model crashed", "code": 500}}
        await self.body(send, json.dumps(error).encode(), more=False)

    async def scenario_huge_error(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """A 503 whose body never ends: only an excerpt may be read."""
        await self.start(send, 503, [(b"content-type", b"text/plain")])

        async def produce() -> None:
            while True:
                await self.body(send, b"x" * 4096)
                await trio.sleep(0.001)

        await self.until_gone(receive, produce)

    async def scenario_malformed(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.stream(send, [event(chunk({"content": "ok"})), b"data: {not json\n\n", DONE])

    async def scenario_bad_shape(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.stream(send, [event(chunk({"content": 42})), DONE])

    async def scenario_bad_args(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        call = {"index": 0, "id": "c1", "function": {"name": "echo", "arguments": '{"text": '}}
        parts = [event(chunk({"tool_calls": [call]})), event(chunk(finish="tool_calls")), DONE]
        await self.stream(send, parts)

    async def scenario_oversized(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.start(send)
        await self.body(send, event(chunk({"content": "fine"})))
        # One line far longer than the client's max_line_bytes, sent in pieces, unending.
        await self.body(send, b'data: {"choices": [{"delta": {"content": "')

        async def produce() -> None:
            while True:
                await self.body(send, b"y" * 1024)
                await trio.sleep(0.001)

        await self.until_gone(receive, produce)

    async def scenario_endless(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        """Streams words until the client goes away."""
        await self.start(send)
        await self.body(send, event(chunk({"role": "assistant"})))

        async def produce() -> None:
            count = 0
            while True:
                await self.body(send, event(chunk({"content": f"w{count} "})))
                count += 1
                await trio.sleep(0.002)

        await self.until_gone(receive, produce)

    async def scenario_stall_headers(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """Headers, then nothing until the client leaves."""
        await self.start(send)
        await self.wait_gone(receive)

    async def scenario_stall_mid(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.start(send)
        await self.body(send, event(chunk({"content": "partial"})))
        await self.wait_gone(receive)

    async def scenario_slow_headers(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """No response at all until the client leaves."""
        await self.wait_gone(receive)

    async def scenario_disconnect(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """Two chunks, then the connection is dropped (the app fails mid-body)."""
        await self.start(send)
        await self.body(send, event(chunk({"content": "Hello"})))
        await self.body(send, event(chunk({"content": " wor"})))
        raise RuntimeError("scripted disconnect")

    async def scenario_no_done(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        """The body ends cleanly but the completion never finished."""
        await self.stream(send, [event(chunk({"content": "cut"}))])

    async def scenario_finish_no_done(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.stream(send, [event(chunk({"content": "ok"}, finish="stop"))])

    async def scenario_stream_error(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        error = {"error": {"message": "server overloaded", "type": "server_error"}}
        await self.stream(send, [event(chunk({"content": "a"})), event(error)])

    async def scenario_error_event(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        await self.stream(send, [b'event: error\ndata: {"message": "bad gateway"}\n\n'])

    async def scenario_json(self, request: dict[str, Any], receive: Receive, send: Send) -> None:
        """A server that ignores ``stream: true`` and answers with one JSON object."""
        body = {
            "id": "chatcmpl-json",
            "object": "chat.completion",
            "model": "fault-model",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "whole answer",
                        "reasoning_content": "whole thought",
                        "tool_calls": [
                            {
                                "id": "j1",
                                "type": "function",
                                "function": {"name": "echo", "arguments": '{"a": 1}'},
                            }
                        ],
                    },
                    "finish_reason": "tool_calls",
                }
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        }
        await self.start(send, 200, [(b"content-type", b"application/json")])
        await self.body(send, json.dumps(body).encode(), more=False)

    async def scenario_comments(
        self, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """Keep-alive comments, an id/retry field and a multi-line data event."""
        parts = [
            b": ping\n\n",
            b"id: 1\nretry: 100\n" + event(chunk({"content": "a"})),
            b": ping\n\n",
            b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "b"}}]}\n\n',
            event(chunk(finish="stop")),
            DONE,
        ]
        await self.stream(send, parts)


class FaultServer:
    """A running :class:`FaultApp`; :meth:`url` gives a scenario's ``base_url``."""

    def __init__(self, root: str, app: FaultApp) -> None:
        self.root = root
        self.app = app

    def url(self, scenario: str) -> str:
        return f"{self.root}/{scenario}/v1"

    async def wait_requests(self, count: int) -> None:
        """Wait (at most 5 s) until the server has received ``count`` requests."""
        with trio.fail_after(5):
            while len(self.app.requests) < count:
                await self.app.request_event.wait()

    async def wait_client_gone(self, count: int) -> None:
        """Wait (at most 5 s) until the server saw ``count`` client disconnects."""
        with trio.fail_after(5):
            while self.app.client_gone < count:
                await self.app.gone_event.wait()


@asynccontextmanager
async def run_fault_server() -> AsyncIterator[FaultServer]:
    """Serve a fresh :class:`FaultApp` on 127.0.0.1 (an ephemeral port) until exit."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.5
    config.accesslog = None
    config.errorlog = None
    app = FaultApp()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait))  # type: ignore[arg-type]
        try:
            yield FaultServer(binds[0], app)
        finally:
            shutdown.set()
            # serve returns once its graceful shutdown is over; bound the wait anyway.
            nursery.cancel_scope.relative_deadline = 5
