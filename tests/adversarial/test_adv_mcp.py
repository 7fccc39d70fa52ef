"""Spec gaps of the MCP and plugin layers (issue 18): defaults, the stdio gate, HTTP liveness."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import emelex
from emelex.app import Agent, Engine
from emelex.app._plugins import PluginError
from emelex.runtime import open_supervisor
from emelex.testing import ApproveAll, Call, Say, ScriptedModel
from emelex.tools.mcp import McpServer, McpServerClosed, open_mcp_connection
from tests.tools.mcp.conftest import TEST_TIMEOUT, HttpServer, child_pids, stdio_server
from tests.tools.mcp.conftest import http_server as http_server  # the fixture

REPO = Path(__file__).resolve().parents[2]
GREETER = REPO / "tests" / "fixtures" / "plugins" / "greeter"

pytestmark = pytest.mark.filterwarnings(
    # The SDK's HTTP client drops its SSE iterators when its task group is cancelled.
    "ignore:Async generator .* was garbage collected:ResourceWarning"
)


def agent_with(
    model: ScriptedModel, *, server: McpServer | None = None, plugin: Path | None = None
) -> Agent:
    builder = Agent.builder().name("adv").instructions("Use the tools.").model(model)
    builder = builder.approver(ApproveAll())
    if server is not None:
        builder = builder.mcp_server(server)
    if plugin is not None:
        builder = builder.plugin(plugin)
    return builder.build()


# -- 1. the default Engine() runs MCP servers and plugins -----------------------------


async def test_the_default_engine_connects_an_http_mcp_server(http_server: HttpServer) -> None:
    model = ScriptedModel([[Call("web__echo", {"text": "hi"})], [Say("done")]])
    agent = agent_with(model, server=McpServer.http("web", http_server.url))
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("adv"), Engine() as engine:
            session = await engine.create(agent).start()
            context = await session.inspect()
            assert "web__echo" in context.tool_names
            turn = await session.send_and_wait("echo hi")
            assert [m.text for m in turn.messages if m.role == "tool"] == ["hi"]


async def test_the_default_engine_loads_plugins() -> None:
    model = ScriptedModel([[Say("hello")]])
    async with Engine() as engine:
        session = await engine.create(agent_with(model, plugin=GREETER)).start()
        assert "greet" in (await session.inspect()).tool_names


def test_a_plugin_that_does_not_compile_fails_build(tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "plugin.toml").write_text('name = "broken"\nentry = "main:register"\n')
    (folder / "main.py").write_text("def register(plugin):\n    pass\n")
    (folder / "helper.py").write_text("x = 1\ndef oops(:\n")
    with pytest.raises(PluginError) as caught:
        agent_with(ScriptedModel([]), plugin=folder)
    assert caught.value.file.endswith("helper.py")
    assert caught.value.line == 2


# -- 2. McpServer at the top level; stdio is a real gate -------------------------------


def test_mcp_server_is_importable_from_emelex_and_emelex_app() -> None:
    from emelex.app import McpServer as AppMcpServer

    assert emelex.McpServer is McpServer
    assert AppMcpServer is McpServer
    assert "McpServer" in emelex.__all__


async def test_stdio_servers_are_refused_unless_the_host_enables_them() -> None:
    from emelex.tools.mcp import McpStdioDisabled

    before = child_pids()
    agent = agent_with(ScriptedModel([]), server=stdio_server())
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("adv"), Engine() as engine:
            with pytest.raises(McpStdioDisabled, match=r"mcp-stdio.*allow_stdio_servers=True"):
                await engine.create(agent).start()
            assert engine.sessions == ()
    assert child_pids() <= before  # nothing was spawned

    model = ScriptedModel([[Call("srv__echo", {"text": "on"})], [Say("ok")]])
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("adv"), Engine(allow_stdio_servers=True) as engine:
            session = await engine.create(agent_with(model, server=stdio_server())).start()
            turn = await session.send_and_wait("echo on")
            assert [m.text for m in turn.messages if m.role == "tool"] == ["on"]
    assert child_pids() <= before


# -- 3. an HTTP server that goes away mid-call -----------------------------------------


@pytest.fixture
def killable_server() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.adversarial.mcp_http_server"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("port "), line
        yield process, f"http://127.0.0.1:{int(line.split()[1])}/mcp"
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()


async def test_a_server_killed_mid_call_fails_the_connection_at_once(
    killable_server: tuple[subprocess.Popen[bytes], str], capfd: pytest.CaptureFixture[str]
) -> None:
    process, url = killable_server
    ended: list[McpServerClosed] = []
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("adv"), open_mcp_connection(McpServer.http("web", url)) as conn:
            assert conn.server.call_timeout == 300.0  # the bound this must not wait for

            async def blocked() -> None:
                try:
                    await conn.call_tool("block")
                except McpServerClosed as exc:
                    ended.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocked)
                await conn.call_tool("wait_started")
                os.kill(process.pid, signal.SIGKILL)
                killed = time.monotonic()
            # The nursery waited for the blocked call: it ended on its own, promptly.
            assert time.monotonic() - killed < 5
            assert len(ended) == 1
            assert isinstance(conn.failure, McpServerClosed)
            assert conn.closed
            with pytest.raises(McpServerClosed):
                await conn.call_tool("echo", {"text": "late"})
    err = capfd.readouterr().err
    assert "Traceback" not in err
    assert "Session termination failed" not in err  # an SDK log line, kept in logging


async def test_a_server_that_stops_answering_fails_within_the_liveness_timeout(
    killable_server: tuple[subprocess.Popen[bytes], str],
) -> None:
    # SIGSTOP: the socket stays open, nothing is ever answered (a hung server, or a host
    # gone without closing TCP). Only pings can tell; the call must not wait 300 s.
    process, url = killable_server
    server = McpServer.http("web", url, liveness_timeout=1.0, shutdown_timeout=1.0)
    ended: list[McpServerClosed] = []
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("adv"), open_mcp_connection(server) as conn:

            async def blocked() -> None:
                try:
                    await conn.call_tool("block")
                except McpServerClosed as exc:
                    ended.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(blocked)
                await conn.call_tool("wait_started")
                await trio.sleep(1.5)  # pings are answered while the server lives
                assert conn.failure is None
                os.kill(process.pid, signal.SIGSTOP)
                stopped = time.monotonic()
            assert time.monotonic() - stopped < 1.0 + 2.0  # the timeout plus slack
            assert len(ended) == 1
            assert isinstance(conn.failure, McpServerClosed)
            assert "no ping within 1 s" in str(conn.failure)
