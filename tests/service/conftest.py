"""One Host test suite, three ways in: the in-process Host, HostClient over the Unix
socket, and HostClient over TCP with the bearer token (``open_host``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.app import Agent
from emelex.service import Host, HostClient
from emelex.service.transport._serve import Listen, ServeOptions, Serving, serve
from tests.service.web_host import chromium_browser

OpenHost = Callable[..., AbstractAsyncContextManager[Any]]


@asynccontextmanager
async def served(
    root: Path, agents: Mapping[str, Agent], *, tcp: bool = False, **options: Any
) -> AsyncIterator[Serving]:
    """``emelex serve`` of ``root`` in this process until the block exits (drained)."""
    stop = trio.Event()
    ready: list[Serving] = []
    started = trio.Event()

    def announce(serving: Serving) -> None:
        ready.append(serving)
        started.set()

    listen = Listen("127.0.0.1", 0) if tcp else None
    config = ServeOptions(root=root, listen=listen, grace=0.0, **options)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve(config, agents, stop=stop, ready=announce))
        with trio.fail_after(30):
            await started.wait()
        try:
            yield ready[0]
        finally:
            stop.set()


@asynccontextmanager
async def _open(kind: str, root: Path, *, agents: Mapping[str, Agent]) -> AsyncIterator[Any]:
    await trio.Path(root).mkdir(parents=True, exist_ok=True)
    if kind == "inprocess":
        async with Host.open(root / ".emelex", agents=agents) as host:
            yield host
        return
    async with served(root, agents, tcp=kind == "tcp") as serving:
        if kind == "unix":
            async with HostClient.connect(root=root) as client:
                yield client
        else:
            assert serving.url is not None and serving.token_path is not None
            token = serving.token_path.read_text().strip()
            async with HostClient.connect(serving.url, token=token) as client:
                yield client


@pytest.fixture(params=["inprocess", "unix", "tcp"])
def open_host(request: pytest.FixtureRequest) -> OpenHost:
    """``async with open_host(root, agents=...) as host``: a Host or a HostClient."""
    kind: str = request.param
    return lambda root, *, agents: _open(kind, root, agents=agents)


@pytest.fixture
def browser() -> Iterator[Any]:
    """A headless Chromium for the web page tests (they skip themselves without one)."""
    pytest.importorskip("playwright.sync_api")
    with chromium_browser() as chromium:
        yield chromium
