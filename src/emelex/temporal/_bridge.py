"""The two crossings between Temporal's asyncio and emelex's Trio.

* :class:`TrioPortal`: asyncio code (an activity) runs a Trio function on the worker's
  one Trio loop with ``trio.from_thread.run`` and its ``trio_token``, from a thread of a
  dedicated pool (the asyncio loop never blocks). Cancelling the asyncio side cancels the
  Trio side by the caller's rule: interrupt it, or ask it to stop and wait for its one
  result.
* :class:`AsyncioThread`: Trio code (an application, a test) runs a coroutine on an
  asyncio loop of its own thread, where Temporal's client and worker live.

:func:`open_trio_thread` starts a dedicated Trio loop for a worker process whose main
thread runs asyncio. Nothing of emelex runs on the asyncio loop but these adapters.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

import trio

from emelex.runtime import open_supervisor
from emelex.temporal._errors import Interrupted, TemporalError

T = TypeVar("T")

#: Threads that may wait in ``trio.from_thread.run`` at once (one per running activity).
DEFAULT_PORTAL_THREADS = 64
#: How long starting or stopping a loop thread may take before it is reported.
THREAD_DEADLINE = 30.0


class _TrioCall:
    """One call's cancel scope, which may be asked to cancel before it exists."""

    __slots__ = ("cancelled", "scope")

    def __init__(self) -> None:
        self.scope: trio.CancelScope | None = None
        self.cancelled = False

    def cancel(self) -> None:  # runs in the Trio thread
        self.cancelled = True
        if self.scope is not None:
            self.scope.cancel()

    async def run(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> T:
        with trio.CancelScope() as scope:
            self.scope = scope
            if self.cancelled:
                scope.cancel()
            return await fn(*args)
        raise Interrupted("the call was interrupted")  # the scope caught our own cancel


class TrioPortal:
    """Runs Trio functions on one Trio loop (``token``) from asyncio code. Calls run in
    a copy of ``context`` (the loop's, with its supervisor): make the portal in Trio
    with :meth:`current`."""

    def __init__(
        self,
        token: trio.lowlevel.TrioToken,
        context: contextvars.Context | None = None,
        *,
        threads: int = DEFAULT_PORTAL_THREADS,
    ) -> None:
        self.token = token
        self._context = context if context is not None else contextvars.Context()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="emelex-portal"
        )

    @classmethod
    def current(cls, *, threads: int = DEFAULT_PORTAL_THREADS) -> TrioPortal:
        """A portal to the calling Trio loop, in the calling task's context."""
        return cls(trio.lowlevel.current_trio_token(), contextvars.copy_context(), threads=threads)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def run_sync_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the Trio thread soon; never blocks (safe from any thread)."""
        self.token.run_sync_soon(fn)

    async def run(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        finish_on_cancel: bool = False,
        on_cancel: Callable[[], object] | None = None,
    ) -> T:
        """Await ``fn(*args)`` run in Trio. When this asyncio task is cancelled,
        ``on_cancel`` runs in Trio; then with ``finish_on_cancel`` the call goes on and
        its one result is returned, otherwise its scope is cancelled, the call is
        awaited to its end (nothing outlives this) and CancelledError propagates."""
        call = _TrioCall()
        loop = asyncio.get_running_loop()
        # from_thread.run runs the Trio task in the calling thread's context: give it a
        # fresh copy of the loop's (a context cannot be entered by two threads at once).
        context = self._context.copy()

        def enter() -> T:
            return trio.from_thread.run(call.run, fn, args, trio_token=self.token)

        def hop() -> T:
            return context.run(enter)

        future = loop.run_in_executor(self._executor, hop)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if on_cancel is not None:
                self.token.run_sync_soon(on_cancel)
            if finish_on_cancel:
                return await _uncancellable(future)
            self.token.run_sync_soon(call.cancel)
            with contextlib.suppress(BaseException):
                await _uncancellable(future)
            raise


async def _uncancellable(future: asyncio.Future[T]) -> T:
    """Await ``future`` to its end even if this task is cancelled again meanwhile."""
    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.done():
                return future.result()


@contextlib.contextmanager
def open_trio_thread(name: str = "emelex-trio") -> Iterator[TrioPortal]:
    """A dedicated thread running one Trio loop (with an emelex supervisor, so tools find
    ``Supervisor.current()``) until the block ends; yields a portal to it."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        stop = trio.Event()
        state["stop"] = stop.set
        async with open_supervisor(name):
            state["portal"] = TrioPortal.current()
            ready.set()
            await stop.wait()

    def target() -> None:
        try:
            trio.run(main)
        except BaseException as exc:
            state["error"] = exc
        finally:
            ready.set()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    if not ready.wait(THREAD_DEADLINE) or "portal" not in state:
        raise TemporalError(f"the Trio loop thread did not start: {state.get('error')!r}")
    portal: TrioPortal = state["portal"]
    try:
        yield portal
    finally:
        with contextlib.suppress(trio.RunFinishedError):
            portal.run_sync_soon(state["stop"])
        thread.join(THREAD_DEADLINE)
        portal.close()


class AsyncioThread:
    """An asyncio loop in its own thread, driven from Trio."""

    def __init__(self, name: str = "emelex-asyncio") -> None:
        # A plain loop of its own, whatever loop policy the process installed (asyncio
        # libraries in tools install trio-asyncio's, which refuses new loops inside Trio).
        self.loop: asyncio.AbstractEventLoop = asyncio.SelectorEventLoop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        # Whatever is still scheduled (the worker's shutdown) gets to finish.
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()

    async def run(self, coro: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Await ``coro()`` run on the asyncio loop. Cancelling the Trio caller cancels
        the asyncio task and waits for it to end."""
        future = asyncio.run_coroutine_threadsafe(coro(), self.loop)
        done = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def wake(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(done.set)

        future.add_done_callback(wake)
        try:
            await done.wait()
        except trio.Cancelled:
            future.cancel()
            with trio.CancelScope(shield=True):
                await done.wait()
            raise
        return future.result()

    def submit(self, coro: Callable[[], Coroutine[Any, Any, T]]) -> concurrent.futures.Future[T]:
        """Start ``coro()`` on the asyncio loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro(), self.loop)

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(THREAD_DEADLINE)


@contextlib.asynccontextmanager
async def open_asyncio_thread(name: str = "emelex-asyncio") -> AsyncIterator[AsyncioThread]:
    thread = AsyncioThread(name)
    try:
        yield thread
    finally:
        await trio.to_thread.run_sync(thread.close)
