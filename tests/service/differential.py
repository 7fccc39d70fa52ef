"""Shared parts of the differential tests: a Trio loop in a thread that hypothesis rules
drive, the agent they run, and the state a session's log rebuilds to."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.service import Host
from emelex.service._reducer import SessionLog, rebuild
from emelex.store import Store
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool

T = TypeVar("T")


@tool(needs_approval=True)
async def mark(text: str) -> str:
    """Mark something.

    Args:
        text: What to mark.
    """
    return f"marked {text}"


def marking_agent() -> Agent:
    """Turns that ask for an approval, then answer (the script never runs out)."""
    rounds: list[list[Any]] = []
    for n in range(400):
        rounds.append([Call("mark", {"text": f"m{n}"})])
        rounds.append([Say(f"answer {n}")])
    model = ScriptedModel(rounds)
    return (
        Agent.builder()
        .name("helper")
        .instructions("Mark.")
        .model(model)
        .tool(mark)
        .approver(DenyAll())
        .build()
    )


class Loop:
    """One Trio run in a thread, for the lifetime of a state machine: its rules call
    into it with :meth:`run`, so a Host stays open across rules."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._nursery: trio.Nursery | None = None
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("the test's Trio loop did not start")

    def _main(self) -> None:
        async def main() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        try:
            trio.run(main)
        except BaseException as exc:  # reported by close()
            self._failure = exc
            self._ready.set()

    def run(self, fn: Callable[..., Awaitable[T]], *args: Any, seconds: float = 60) -> T:
        async def bounded() -> T:
            with trio.fail_after(seconds):
                return await fn(*args)

        return trio.from_thread.run(bounded, trio_token=self._token)

    @property
    def nursery(self) -> trio.Nursery:
        assert self._nursery is not None
        return self._nursery

    def close(self) -> None:
        if self._stop is not None and self._token is not None:
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(60)
        if self._failure is not None:
            raise self._failure


class OpenHost:
    """A Host kept open in the loop's nursery until :meth:`close`."""

    def __init__(self, host: Host, closed: trio.Event, done: trio.Event) -> None:
        self.host = host
        self._closed = closed
        self._done = done

    @classmethod
    async def start(cls, nursery: trio.Nursery, **options: Any) -> OpenHost:
        closed, done = trio.Event(), trio.Event()

        async def own(task_status: trio.TaskStatus[Host] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                async with Host.open(**options) as host:
                    task_status.started(host)
                    await closed.wait()
            finally:
                done.set()

        host = await nursery.start(own)
        return cls(host, closed, done)

    async def close(self) -> None:
        self._closed.set()
        await self._done.wait()


async def rebuilt(store: Store, live: SessionLog, through: int) -> dict[str, Any]:
    """The snapshot of ``live``'s session rebuilt from ``store`` alone, through the
    event ``through``."""
    config = await store.load_config(live.session_id)
    log = SessionLog.from_config(
        live.session_id, config, created_at=live.created_at, capacity=live.queue.capacity
    )
    while True:
        events = await store.events_after(live.session_id, log.revision, limit=1000)
        events = tuple(e for e in events if e.sequence <= through)
        if not events:
            return log.snapshot()
        rebuild(log, events)


async def logs_of(host: Host) -> dict[str, SessionLog]:
    """Every session's log once no commit is under way (each session's lock held in
    turn: a commit applies its events before it lets the lock go)."""
    logs = {}
    for session_id, session in host._registry.items():
        async with session.lock:
            logs[session_id] = session.log
    return logs


async def until(condition: Callable[[], bool]) -> None:
    """Wait for another Host's follower to get somewhere (the caller's deadline bounds
    it): it moves on notifications and its catch-up query, which no event here tells."""
    while True:
        if condition():
            return
        await trio.sleep(0.01)
