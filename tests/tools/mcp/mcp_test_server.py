"""A small real MCP server built with the SDK's FastMCP, for the MCP client tests.

Run as a script it serves over stdio (``python mcp_test_server.py``); the tests also
build it in process (:func:`build_server`) and serve its Streamable HTTP app on loopback.
Each server has its own state, so the cancellation probes are per server.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import sys
from typing import Any

import anyio
from mcp.server.fastmcp import Context, FastMCP
from mcp.server.fastmcp.exceptions import ToolError
from mcp.types import (
    AudioContent,
    EmbeddedResource,
    ImageContent,
    SamplingMessage,
    TextContent,
    TextResourceContents,
)
from pydantic import BaseModel

_log = logging.getLogger("emelex.tests.mcp_server")
#: A 1x1 transparent PNG.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
#: How long the probe tools wait for an event before giving up (never reached when green).
PROBE_TIMEOUT = 20.0


class _Probe:
    """Server-side facts the tests wait for: a blocking call started, then was cancelled."""

    def __init__(self) -> None:
        self.started = 0
        self.cancelled = 0
        self._started: anyio.Event | None = None
        self._cancelled: anyio.Event | None = None

    def started_event(self) -> anyio.Event:
        if self._started is None:
            self._started = anyio.Event()
        return self._started

    def cancelled_event(self) -> anyio.Event:
        if self._cancelled is None:
            self._cancelled = anyio.Event()
        return self._cancelled


def build_server(name: str = "emelex-test") -> FastMCP:
    server = FastMCP(name, instructions="A test server.", log_level="WARNING")
    probe = _Probe()

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str) -> str:
        """Always fail with the message."""
        raise ToolError(message)

    @server.tool()
    def big(size: int) -> str:
        """Return ``size`` characters."""
        return "x" * size

    @server.tool()
    def pid() -> int:
        """The server's process id."""
        return os.getpid()

    @server.tool()
    def header(name: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """The SHA-256 of an HTTP request header's value (Streamable HTTP only); a digest,
        so the tests can check that no log holds the value itself."""
        request: Any = ctx.request_context.request
        if request is None:
            return "<no http request>"
        value = request.headers.get(name)
        return "<missing>" if value is None else hashlib.sha256(value.encode()).hexdigest()

    @server.tool()
    def mixed() -> list[Any]:
        """Text, an image, audio and an embedded text resource."""
        encoded = base64.b64encode(PNG).decode()
        return [
            TextContent(type="text", text="caption"),
            ImageContent(type="image", data=encoded, mimeType="image/png"),
            AudioContent(
                type="audio", data=base64.b64encode(b"RIFF").decode(), mimeType="audio/wav"
            ),
            EmbeddedResource(
                type="resource",
                resource=TextResourceContents(
                    uri="file:///notes.txt",  # type: ignore[arg-type]
                    mimeType="text/plain",
                    text="resource body",
                ),
            ),
        ]

    @server.tool()
    async def block() -> str:
        """Block until cancelled (counts started and cancelled calls)."""
        _log.debug("block: started")
        probe.started += 1
        probe.started_event().set()
        try:
            await anyio.sleep_forever()
        finally:
            _log.debug("block: cancelled")
            probe.cancelled += 1
            probe.cancelled_event().set()
        return "unreachable"

    @server.tool()
    async def wait_started() -> int:
        """Wait until a ``block`` call has started; return how many did."""
        _log.debug("wait_started: waiting")
        with anyio.fail_after(PROBE_TIMEOUT):
            await probe.started_event().wait()
        return probe.started

    @server.tool()
    async def wait_cancelled() -> int:
        """Wait until a ``block`` call was cancelled; return how many were."""
        with anyio.fail_after(PROBE_TIMEOUT):
            await probe.cancelled_event().wait()
        return probe.cancelled

    @server.tool(name="bad name!")
    def bad_name() -> str:
        """A tool whose name the harness refuses."""
        return "no"

    @server.tool()
    def bad_schema(value: int) -> int:
        """A tool whose schema is broken below (the harness drops it)."""
        return value

    # FastMCP derives valid schemas; break one on purpose to exercise discovery checks.
    tool = server._tool_manager.get_tool("bad_schema")
    assert tool is not None
    tool.parameters = {"type": "object", "properties": {"value": {"type": "no-such-type"}}}

    @server.tool()
    async def confirm(action: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Ask the user to confirm ``action`` (elicitation); say what they answered."""
        try:
            result = await ctx.elicit(f"Really {action}?", schema=Confirmation)
        except Exception as exc:  # the client offers no elicitation
            raise ToolError(f"could not ask: {exc}") from exc
        if result.action == "accept":
            data = result.data
            return f"{'confirmed' if data.confirm else 'refused'} {action} ({data.note})"
        return result.action

    @server.tool()
    async def summarise(text: str, ctx: Context) -> str:  # type: ignore[type-arg]
        """Ask the client's model to summarise ``text`` (sampling)."""
        try:
            result = await ctx.session.create_message(
                [SamplingMessage(role="user", content=TextContent(type="text", text=text))],
                max_tokens=40,
                system_prompt="Summarise in five words.",
            )
        except Exception as exc:
            raise ToolError(f"could not sample: {exc}") from exc
        content = result.content
        assert isinstance(content, TextContent)
        return f"{result.model}: {content.text}"

    return server


class Confirmation(BaseModel):
    confirm: bool
    note: str = ""


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--exit-at-once":
        sys.exit(3)
    build_server().run("stdio")
