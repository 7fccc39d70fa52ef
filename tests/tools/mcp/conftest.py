"""Real MCP servers for the client tests: a stdio subprocess and Streamable HTTP on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp.server.fastmcp import FastMCP

from emelex.runtime import Supervisor
from emelex.tools.mcp import McpServer
from tests.tools.mcp.mcp_test_server import build_server

SERVER_SCRIPT = Path(__file__).with_name("mcp_test_server.py")
#: Bound on every test (a Python subprocess importing the SDK takes about a second).
TEST_TIMEOUT = 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            # The SDK's Streamable HTTP client drops its SSE iterators when its task group
            # is cancelled on close; Trio reports each as a ResourceWarning at collection.
            item.add_marker(
                pytest.mark.filterwarnings(
                    "ignore:Async generator .* was garbage collected:ResourceWarning"
                )
            )


def stdio_server(name: str = "srv", *args: str, **options: Any) -> McpServer:
    return McpServer.stdio(name, sys.executable, [str(SERVER_SCRIPT), *args], **options)


@pytest.fixture
def stdio() -> McpServer:
    return stdio_server()


def child_pids() -> set[int]:
    """Live (or zombie) processes whose parent is this test process."""
    me = os.getpid()
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.add(int(entry))
    return found


def process_exists(pid: int) -> bool:
    """Whether ``pid`` still names a process (a zombie counts: it was not reaped)."""
    return os.path.exists(f"/proc/{pid}")


def assert_no_actors() -> None:
    snapshot = Supervisor.current().snapshot()
    assert snapshot.roots == (), snapshot


@pytest.fixture(autouse=True)
def _no_leftovers() -> Iterator[None]:
    before = child_pids()
    yield
    assert child_pids() <= before


@attrs.define
class HttpServer:
    """A FastMCP server's Streamable HTTP app served by hypercorn under Trio."""

    app: FastMCP
    base: str

    @property
    def url(self) -> str:
        return self.base + "/mcp"


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    app = build_server("emelex-http-test")
    asgi: Any = app.streamable_http_app()  # a Starlette app; hypercorn's types are narrower
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    config.errorlog = None
    config.graceful_timeout = 1.0
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(
            lambda task_status: serve(
                asgi,
                config,
                shutdown_trigger=shutdown.wait,
                task_status=task_status,
            )
        )
        yield HttpServer(app, binds[0])
        shutdown.set()
