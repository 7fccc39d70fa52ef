"""A real Streamable HTTP MCP server (FastMCP served by hypercorn on loopback)."""

from __future__ import annotations

import hashlib
import logging
import socket

import pytest
import trio

from emelex.runtime import Supervisor
from emelex.tools.mcp import (
    ACTOR_KIND,
    McpConnection,
    McpConnectionFailed,
    McpServer,
    McpServerClosed,
    open_mcp_connection,
)
from tests.tools.mcp.conftest import TEST_TIMEOUT, HttpServer, assert_no_actors

SECRET = "Bearer http-s3cret-value"


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_discovery_headers_and_calls_over_http(
    http_server: HttpServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server = McpServer.http(
        "web", http_server.url, headers={"Authorization": SECRET, "X-Tenant": "t-1"}
    )
    assert "s3cret" not in repr(server)
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection:
            assert "s3cret" not in repr(connection)
            names = [tool.definition.name for tool in connection.tools()]
            assert "web__echo" in names
            assert "web__header" in names
            assert len(connection.warnings) == 2
            assert connection.server_info.name == "emelex-http-test"
            # The host's headers reach the server with every request.
            authorization = await connection.call_tool("header", {"name": "authorization"})
            assert authorization.text == digest(SECRET)
            tenant = await connection.call_tool("header", {"name": "x-tenant"})
            assert tenant.text == digest("t-1")
            missing = await connection.call_tool("header", {"name": "x-absent"})
            assert missing.text == "<missing>"
            added = await connection.call_tool("add", {"a": 20, "b": 22})
            assert added.text == "42"
            failed = await connection.call_tool("fail", {"message": "http boom"})
            assert failed.is_error
            assert "http boom" in failed.text
            [actor] = Supervisor.current().snapshot().find(ACTOR_KIND)
            assert actor.name == "web"
            reason = connection.tool("web__echo").approval_reason({"text": "x"})
            assert reason is not None
            assert "s3cret" not in reason
            assert f'(http "{http_server.url}")' in reason
        assert_no_actors()
        with pytest.raises(McpServerClosed):
            await connection.call_tool("echo", {"text": "late"})
    assert "s3cret" not in caplog.text


async def test_cancellation_mid_call_over_http_keeps_the_connection(
    http_server: HttpServer,
) -> None:
    server = McpServer.http("web", http_server.url)
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.call_tool, "block")
                assert (await connection.call_tool("wait_started")).text == "1"
                nursery.cancel_scope.cancel()
            assert (await connection.call_tool("wait_cancelled")).text == "1"
            assert (await connection.call_tool("echo", {"text": "again"})).text == "again"
            await connection.ping()
        assert_no_actors()


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


async def test_unreachable_and_wrong_endpoints_fail_to_connect(
    http_server: HttpServer,
) -> None:
    refused = McpServer.http("down", f"http://127.0.0.1:{unused_port()}/mcp", connect_timeout=10)
    wrong_path = McpServer.http("lost", http_server.base + "/not-mcp", connect_timeout=10)
    with trio.fail_after(TEST_TIMEOUT):
        for server in (refused, wrong_path):
            with pytest.raises(McpConnectionFailed, match="could not connect") as caught:
                async with open_mcp_connection(server):
                    pytest.fail("connected to a server that is not there")
            assert caught.value.server == server.name
            assert caught.value.__cause__ is not None
    assert_no_actors()


async def test_concurrent_calls_over_http_each_reach_the_server_once(
    http_server: HttpServer,
) -> None:
    # mcp 1.30's Streamable HTTP client spawns one task per request from a closure over
    # its loop variable: two requests taken before the first task ran would both POST the
    # second one (one call lost, the other run twice). The connection gates requests so
    # that cannot happen; many simultaneous calls would expose it.
    server = McpServer.http("web", http_server.url, call_timeout=20)
    results: dict[int, str] = {}

    async def call(connection: McpConnection, index: int) -> None:
        output = await connection.call_tool("echo", {"text": f"call {index}"})
        results[index] = output.text

    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection, trio.open_nursery() as nursery:
            for index in range(30):
                nursery.start_soon(call, connection, index)
    assert results == {index: f"call {index}" for index in range(30)}
