"""A Host served over real hypercorn (loopback TCP with a token, and its Unix socket)
in a thread of its own, for tests that drive it from synchronous code (a browser).

The thread runs its own Trio loop; the test's thread stays free for Playwright's
synchronous API (which runs an asyncio loop of its own).
"""

from __future__ import annotations

import asyncio
import importlib
import os
import queue
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import attrs
import trio

from emelex.app import Agent
from emelex.service.transport._serve import Listen, ServeOptions, Serving, serve

T = TypeVar("T")
START_SECONDS = 60


@attrs.frozen
class ServedHost:
    serving: Serving
    token: str
    _trio_token: trio.lowlevel.TrioToken

    @property
    def url(self) -> str:
        assert self.serving.url is not None
        return self.serving.url

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` on the Host's Trio loop (say, a HostClient call) and return its result."""
        return trio.from_thread.run(fn, trio_token=self._trio_token)


@contextmanager
def served_host(root: Path, agents: Mapping[str, Agent]) -> Iterator[ServedHost]:
    """Serve ``agents`` for ``root`` on 127.0.0.1 (a free port) until the block ends."""
    started: queue.Queue[tuple[Serving, trio.lowlevel.TrioToken, trio.Event] | BaseException]
    started = queue.Queue()
    stopped: list[BaseException] = []

    async def main() -> None:
        stop = trio.Event()
        trio_token = trio.lowlevel.current_trio_token()
        options = ServeOptions(root=root, listen=Listen("127.0.0.1", 0), grace=0.5)
        await serve(options, agents, stop=stop, ready=lambda s: started.put((s, trio_token, stop)))

    def thread() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # handed to the test's thread
            stopped.append(exc)
            started.put(exc)

    worker = threading.Thread(target=thread, name="served-host", daemon=True)
    worker.start()
    first = started.get(timeout=START_SECONDS)
    if isinstance(first, BaseException):
        raise first
    serving, trio_token, stop = first
    assert serving.token_path is not None
    token = serving.token_path.read_text().strip()
    try:
        yield ServedHost(serving, token, trio_token)
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=trio_token)
        worker.join(timeout=START_SECONDS)
        assert not worker.is_alive(), "the served Host did not stop"
        if stopped:
            raise stopped[0]


def call_host(served: ServedHost, method: str, *args: Any, **kwargs: Any) -> Any:
    """One HostClient call over the Unix socket, made on the Host's loop."""
    from emelex.service import HostClient

    async def go() -> Any:
        async with HostClient.connect(root=served.serving.socket_path.parent.parent) as client:
            return await getattr(client, method)(*args, **kwargs)

    return served.run(go)


@contextmanager
def plain_asyncio() -> Iterator[None]:
    """A plain asyncio event-loop policy in this thread while Playwright's sync API runs.

    Once anything in the process imported trio_asyncio (the emelex.aio tests do), new
    asyncio loops are trio-asyncio's own, on which Playwright's sync driver breaks and
    leaves the thread unusable for every later asyncio user; a thread-local plain policy
    gives Playwright an ordinary loop.
    """
    asyncio.set_event_loop_policy(asyncio.DefaultEventLoopPolicy())
    try:
        yield
    finally:
        asyncio.set_event_loop_policy(None)


CHROMIUM = "/usr/bin/chromium"
NO_CHROMIUM = f"no {CHROMIUM}: apt-get install chromium (scripts/test does)"


def chromium_missing() -> bool:
    """Whether to skip browser tests: only outside CI, where Chromium may be absent. In CI
    it must be installed, so the tests run and fail instead of skipping silently."""
    return not os.access(CHROMIUM, os.X_OK) and os.environ.get("CI") != "true"


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """A headless Chromium through Playwright's sync API, closed on exit."""
    sync_api = importlib.import_module("playwright.sync_api")
    with plain_asyncio(), sync_api.sync_playwright() as playwright:
        # As root (CI), Chromium refuses to start without --no-sandbox.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, directory: Path, name: str) -> None:
    """The whole page as ``directory/name.png``, kept as the test's artifact."""
    page.screenshot(path=str(directory / f"{name}.png"), full_page=True)
