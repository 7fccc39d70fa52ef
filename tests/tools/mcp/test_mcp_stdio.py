"""A real stdio MCP server (FastMCP in a subprocess) through the connection actor."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp
import pytest
import trio

from emelex.agent import AgentCancellation, AgentSession, TurnCancelled
from emelex.agent._turn_rules import INTERRUPTED
from emelex.model import AudioPart, ImagePart, TextPart, ToolCall
from emelex.runtime import Supervisor, open_supervisor
from emelex.testing import ApproveAll, Call, Say, ScriptedModel
from emelex.tools import AgentTool, ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.mcp import (
    ACTOR_KIND,
    McpConnection,
    McpConnectionFailed,
    McpServer,
    McpServerClosed,
    McpTimeout,
    McpToolNotFound,
    open_mcp_connection,
    start_mcp_connection,
)
from emelex.tools.mcp import _sdk as sdk_module
from tests.tools.mcp.conftest import (
    SERVER_SCRIPT,
    TEST_TIMEOUT,
    assert_no_actors,
    child_pids,
    process_exists,
    stdio_server,
)
from tests.tools.mcp.mcp_test_server import PNG


def text(output: ToolOutput) -> str:
    return output.text


def invocation(
    name: str, arguments: dict[str, Any], cancellation: AgentCancellation | None = None
) -> ToolInvocation:
    return ToolInvocation(
        ToolCall("call-1", name, arguments), cancellation or AgentCancellation(), "turn", "session"
    )


async def pid_of(connection: McpConnection) -> int:
    return int(text(await connection.call_tool("pid")))


async def test_discovery_calls_errors_and_clean_shutdown(stdio: McpServer) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection:
            names = [tool.definition.name for tool in connection.tools()]
            assert names == [
                "srv__echo",
                "srv__add",
                "srv__fail",
                "srv__big",
                "srv__pid",
                "srv__header",
                "srv__mixed",
                "srv__block",
                "srv__wait_started",
                "srv__wait_cancelled",
                "srv__confirm",
                "srv__summarise",
            ]
            # Invalid names and schemas are dropped, each with a warning.
            assert len(connection.warnings) == 2
            assert '"bad name!" dropped' in connection.warnings[0]
            assert '"bad_schema" dropped: its input schema is invalid' in connection.warnings[1]
            assert connection.server_info.name == "emelex-test"
            assert connection.server_info.instructions == "A test server."

            add = connection.tool("srv__add")
            assert isinstance(add, AgentTool)
            assert add.cancellation_policy is ToolCancellationPolicy.INTERRUPTIBLE
            assert add.definition.parameters["required"] == ["a", "b"]
            assert add.definition.description == "Add two integers."

            output = await add.invoke(invocation("srv__add", {"a": 2, "b": 40}))
            assert output == ToolOutput("42")

            failed = await connection.call_tool("fail", {"message": "boom"})
            assert failed.is_error
            assert "boom" in failed.text

            # The server refuses bad arguments with an error result, not a crash.
            invalid = await connection.call_tool("add", {"a": "x", "b": 1})
            assert invalid.is_error

            with pytest.raises(McpToolNotFound):
                await connection.call_tool("bad_schema", {"value": 1})
            with pytest.raises(McpToolNotFound):
                connection.tool("srv__nope")

            [actor] = Supervisor.current().snapshot().find(ACTOR_KIND)
            assert actor.name == "srv"
            assert actor.mailbox is not None
            assert actor.mailbox.capacity == stdio.mailbox
            server_pid = await pid_of(connection)
            assert server_pid in child_pids()
        assert connection.closed
        assert connection.failure is None
        assert_no_actors()
        assert server_pid not in child_pids()
        assert not process_exists(server_pid)  # exited and reaped
        with pytest.raises(McpServerClosed):
            await connection.call_tool("echo", {"text": "late"})


async def test_content_mapping_and_result_bound() -> None:
    server = stdio_server(max_result_bytes=2048)
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection:
            mixed = await connection.call_tool("mixed")
            assert mixed.content == (
                TextPart("caption"),
                ImagePart(PNG, "image/png"),
                AudioPart(b"RIFF", "audio/wav"),
                TextPart("[resource file:///notes.txt (text/plain)]\nresource body"),
            )
            small = await connection.call_tool("big", {"size": 100})
            assert small.text == "x" * 100
            large = await connection.call_tool("big", {"size": 100_000})
            assert not large.is_error
            assert large.text.endswith("[output cut: the MCP result exceeded 2048 bytes]")
            assert len(large.text.encode()) <= 2048


async def test_trio_cancellation_mid_call_notifies_the_server_and_keeps_the_connection(
    stdio: McpServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(connection.call_tool, "block")
                # Another task waits on the server until the blocking call runs there.
                assert text(await connection.call_tool("wait_started")) == "1"
                nursery.cancel_scope.cancel()
            # The server saw notifications/cancelled: its handler was cancelled.
            assert text(await connection.call_tool("wait_cancelled")) == "1"
            assert text(await connection.call_tool("echo", {"text": "still here"})) == "still here"
            await connection.ping()
        assert_no_actors()


async def test_agent_cancellation_ends_the_invocation_with_an_error_result(
    stdio: McpServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection:
            block = connection.tool("srv__block")
            cancellation = AgentCancellation()
            outputs: list[ToolOutput] = []

            async def run() -> None:
                outputs.append(await block.invoke(invocation("srv__block", {}, cancellation)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(run)
                await connection.call_tool("wait_started")
                cancellation.cancel()
            [output] = outputs
            assert output.is_error
            assert output.text.startswith("cancelled:")
            assert "effects are unknown" in output.text
            assert text(await connection.call_tool("wait_cancelled")) == "1"
            assert text(await connection.call_tool("add", {"a": 1, "b": 1})) == "2"


async def test_call_timeout_cancels_on_the_server() -> None:
    server = stdio_server(call_timeout=0.5)
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection:
            with pytest.raises(McpTimeout, match=r"did not finish within 0\.5 s"):
                await connection.call_tool("block")
            assert text(await connection.call_tool("wait_cancelled")) == "1"
            # Through the tool the timeout is an error result for the model.
            output = await connection.tool("srv__block").invoke(invocation("srv__block", {}))
            assert output.is_error
            assert "did not finish within 0.5 s" in output.text
            unbounded = await connection.call_tool("echo", {"text": "ok"}, call_timeout=None)
            assert unbounded.text == "ok"


async def test_session_is_entered_and_exited_by_the_actor_task_only(
    stdio: McpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks: list[tuple[str, trio.lowlevel.Task]] = []
    real_enter = mcp.ClientSession.__aenter__
    real_exit = mcp.ClientSession.__aexit__
    real_transport = sdk_module.open_transport

    async def enter(self: mcp.ClientSession) -> mcp.ClientSession:
        tasks.append(("session enter", trio.lowlevel.current_task()))
        return await real_enter(self)

    async def exit_(self: mcp.ClientSession, *exc_info: Any) -> bool | None:
        tasks.append(("session exit", trio.lowlevel.current_task()))
        return await real_exit(self, *exc_info)

    @asynccontextmanager
    async def transport(server: McpServer, on_lost: Any = None) -> AsyncIterator[Any]:
        tasks.append(("transport enter", trio.lowlevel.current_task()))
        async with real_transport(server, on_lost) as streams:
            yield streams
        tasks.append(("transport exit", trio.lowlevel.current_task()))

    monkeypatch.setattr(mcp.ClientSession, "__aenter__", enter)
    monkeypatch.setattr(mcp.ClientSession, "__aexit__", exit_)
    monkeypatch.setattr(sdk_module, "open_transport", transport)
    callers: set[trio.lowlevel.Task] = set()

    async def use(connection: McpConnection, index: int) -> None:
        callers.add(trio.lowlevel.current_task())
        assert text(await connection.call_tool("echo", {"text": str(index)})) == str(index)

    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection:
            async with trio.open_nursery() as nursery:
                for index in range(5):
                    nursery.start_soon(use, connection, index)
                # One caller is cancelled mid-call; the others are unaffected.
                nursery.start_soon(connection.call_tool, "block")
                await connection.call_tool("wait_started")
                async with trio.open_nursery() as inner:
                    inner.start_soon(use, connection, 99)
                nursery.cancel_scope.cancel()
            assert text(await connection.call_tool("wait_cancelled")) == "1"
    assert [what for what, _ in tasks] == [
        "transport enter",
        "session enter",
        "session exit",
        "transport exit",
    ]
    owners = {task for _, task in tasks}
    assert len(owners) == 1
    [owner] = owners
    assert owner is not trio.lowlevel.current_task()
    assert owner not in callers
    assert len(callers) == 6
    assert_no_actors()


async def test_concurrent_calls_from_many_tasks(stdio: McpServer) -> None:
    results: dict[int, str] = {}

    async def call(connection: McpConnection, index: int) -> None:
        output = await connection.call_tool("add", {"a": index, "b": 1000})
        results[index] = output.text

    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection, trio.open_nursery() as nursery:
            for index in range(40):  # more than the mailbox and the concurrency limit
                nursery.start_soon(call, connection, index)
    assert results == {index: str(index + 1000) for index in range(40)}


async def test_closing_with_calls_in_flight_fails_them_cleanly(stdio: McpServer) -> None:
    errors: list[BaseException] = []

    async def blocked(connection: McpConnection) -> None:
        try:
            await connection.call_tool("block")
        except McpServerClosed as exc:
            errors.append(exc)

    with trio.fail_after(TEST_TIMEOUT):
        async with trio.open_nursery() as nursery:
            async with open_mcp_connection(stdio) as connection:
                nursery.start_soon(blocked, connection)
                await connection.call_tool("wait_started")
            # Leaving the block closed the connection; the blocked caller was released.
    assert len(errors) == 1
    assert_no_actors()


async def test_cancelling_the_owner_still_closes_the_server(stdio: McpServer) -> None:
    pids: list[int] = []
    with trio.fail_after(TEST_TIMEOUT):
        with trio.CancelScope() as scope:
            async with open_mcp_connection(stdio) as connection:
                pids.append(await pid_of(connection))
                scope.cancel()
                await trio.sleep_forever()
    assert scope.cancelled_caught
    assert pids[0] not in child_pids()
    assert_no_actors()


async def test_server_exiting_mid_session_gives_server_closed() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio_server()) as connection:
            server_pid = await pid_of(connection)
            os.kill(server_pid, 9)
            with pytest.raises(McpServerClosed):
                await connection.call_tool("echo", {"text": "anyone?"})
            assert connection.closed
            assert isinstance(connection.failure, McpServerClosed)
            output = await connection.tool("srv__echo").invoke(invocation("srv__echo", {}))
            assert output.is_error
            assert "closed" in output.text
        assert_no_actors()
        assert server_pid not in child_pids()


async def test_connection_failures_are_typed() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        with pytest.raises(McpConnectionFailed, match="could not connect") as caught:
            async with open_mcp_connection(stdio_server("dies", "--exit-at-once")):
                pytest.fail("connected to a server that exited")
        assert caught.value.server == "dies"
        assert caught.value.__cause__ is not None
        missing = McpServer.stdio("missing", "emelex-no-such-mcp-server")
        with pytest.raises(McpConnectionFailed, match="not found on PATH") as caught:
            async with open_mcp_connection(missing):
                pytest.fail("connected to a missing command")
        assert isinstance(caught.value.__cause__, FileNotFoundError)
        silent = McpServer.stdio(
            "silent",
            sys.executable,
            ["-c", "import time; time.sleep(60)"],
            connect_timeout=0.5,
            shutdown_timeout=1.0,
        )
        with pytest.raises(McpConnectionFailed, match=r"within 0\.5 s"):
            async with open_mcp_connection(silent):
                pytest.fail("connected to a silent process")
    assert_no_actors()


async def test_approval_reasons_and_trusted_servers() -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio_server()) as connection:
            echo = connection.tool("srv__echo")
            reason = echo.approval_reason({"text": "rm -rf /\u202e"})
            assert reason is not None
            assert reason.startswith('call MCP tool "echo" on server "srv" (stdio ')
            assert reason.endswith('with arguments {"text": "rm -rf /\\u202e"}')
            assert echo.authority_identity["mcp.tool"] == "echo"
        trusted = stdio_server(trusted=True, allow_tools=["echo"], prefix_tools=False)
        async with open_mcp_connection(trusted) as connection:
            [echo] = connection.tools()
            assert echo.definition.name == "echo"
            assert echo.approval_reason({"text": "x"}) is None


async def test_agent_session_turn_calls_the_mcp_tool(stdio: McpServer, tmp_path: Path) -> None:
    approvals = ApproveAll()
    model = ScriptedModel([[Call("srv__echo", {"text": "from mcp"})], [Say("ok")]])
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(stdio) as connection:
            builder = (
                AgentSession.builder(model, tmp_path)
                .include_file_tools(False)
                .include_shell_tool(False)
                .tools(connection.tools())
                .approval_policy(approvals)
            )
            with builder.build() as session:
                turn = await session.run("echo something")
            [tool_message] = [m for m in turn.messages if m.role == "tool"]
            assert tool_message.text == "from mcp"
            assert turn.messages[-1].text == "ok"
            [asked] = approvals.asked
            assert asked.reason.startswith('call MCP tool "echo" on server "srv"')
            advertised = {tool.name for tool in model.requests[0].tools}
            assert "srv__echo" in advertised
        assert_no_actors()


async def test_cancelled_turn_interrupts_the_mcp_call_and_keeps_the_connection(
    stdio: McpServer, tmp_path: Path
) -> None:
    model = ScriptedModel([[Call("srv__block", {})], [Say("unreachable")], [Say("again")]])
    cancellation = AgentCancellation()
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("mcp-test"), open_mcp_connection(stdio) as connection:
            builder = (
                AgentSession.builder(model, tmp_path)
                .include_file_tools(False)
                .include_shell_tool(False)
                .tools(connection.tools())
                .approval_policy(ApproveAll())
            )
            with builder.build() as session:
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        with pytest.raises(TurnCancelled):
                            await session.run("block", cancellation=cancellation)

                    nursery.start_soon(turn)
                    await connection.call_tool("wait_started")
                    cancellation.cancel()
                [tool_message] = [m for m in session.history if m.role == "tool"]
                assert tool_message.text == INTERRUPTED
            assert text(await connection.call_tool("wait_cancelled")) == "1"
            assert text(await connection.call_tool("echo", {"text": "alive"})) == "alive"
            assert [info.kind for info in Supervisor.current().snapshot().walk()] == [ACTOR_KIND]
        assert_no_actors()


async def test_header_and_env_values_are_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = McpServer.stdio(
        "srv", sys.executable, [str(SERVER_SCRIPT)], env={"MCP_TEST_SECRET": "env-s3cret"}
    )
    caplog.set_level(logging.DEBUG)
    with trio.fail_after(TEST_TIMEOUT):
        async with open_mcp_connection(server) as connection:
            await connection.call_tool("echo", {"text": "x"})
    assert "env-s3cret" not in caplog.text


async def test_closing_does_not_wait_for_busy_slots_or_queued_calls() -> None:
    server = stdio_server(max_concurrent_calls=1, mailbox=4)
    outcomes: list[str] = []

    async def call(connection: McpConnection, name: str) -> None:
        try:
            await connection.call_tool(name)
        except McpServerClosed:
            outcomes.append(f"{name} closed")

    with trio.fail_after(TEST_TIMEOUT):
        async with trio.open_nursery() as nursery:
            async with open_mcp_connection(server) as connection:
                nursery.start_soon(call, connection, "block")
                await trio.testing.wait_all_tasks_blocked()
                # ``block`` holds the only slot; ``pid`` waits in the mailbox behind it.
                nursery.start_soon(call, connection, "pid")
                await trio.testing.wait_all_tasks_blocked()
                [actor] = Supervisor.current().snapshot().find(ACTOR_KIND)
                assert actor.mailbox is not None
                assert actor.mailbox.sent == 2
            # Leaving the block released both callers at once.
    assert sorted(outcomes) == ["block closed", "pid closed"]
    assert_no_actors()


async def test_started_connection_lives_in_a_given_nursery_and_closes_from_any_task(
    stdio: McpServer,
) -> None:
    with trio.fail_after(TEST_TIMEOUT):
        async with open_supervisor("service") as supervisor:
            connection = await start_mcp_connection(supervisor.actors, stdio)
            server_pid = await pid_of(connection)
            [actor] = supervisor.snapshot().find(ACTOR_KIND)
            assert actor.parent is None

            async with trio.open_nursery() as nursery:
                # Another task closes it: the actor's own task still does the closing.
                nursery.start_soon(connection.aclose)
            assert connection.closed
            await connection.aclose()  # idempotent
            assert supervisor.snapshot().roots == ()
            assert server_pid not in child_pids()
            with pytest.raises(McpServerClosed):
                await connection.call_tool("echo", {"text": "late"})
