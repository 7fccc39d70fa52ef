"""Differential test of the one reducer: live state == state rebuilt from the log.

A hypothesis state machine drives a Host that stays open across steps: it creates
sessions, sends (retrying operation references), stops queued and running work, approves
and denies, forks, starts workers, fails titles (the scripted model answers title calls
with no text), restarts the Host, and crashes it (a consistent copy of the store taken at
a random point of a running turn, opened by a second Host as after ``kill -9``). After
every step each session's live state equals the state a fresh store connection rebuilds
from the log alone; on PostgreSQL a second Host follows the first and must hold the same
state too; a restart changes no answer.

``EMELEX_DIFFERENTIAL_EXAMPLES`` sets the examples per store (200 by default).
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import trio
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from emelex.contracts import AgentWorker, ApproveResponse, DenyResponse, from_wire
from emelex.service import ForkRefused, Host, InteractionSettled, ScaleOut
from emelex.store import open_sqlite_store
from emelex.store.postgres import open_postgres_store
from tests.postgres_server import PostgresServer
from tests.service.differential import Loop, OpenHost, logs_of, marking_agent, rebuilt, until

EXAMPLES = int(os.environ.get("EMELEX_DIFFERENTIAL_EXAMPLES", "200"))
FAST = ScaleOut(lease_seconds=1.0, catch_up_seconds=0.05)


class HostLog(RuleBasedStateMachine):
    """See the module docs. ``dsn`` None: SQLite; else a fresh PostgreSQL database."""

    dsn: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self._temp = tempfile.TemporaryDirectory()
        self.base = Path(self._temp.name)
        (self.base / "work").mkdir()
        self.loop = Loop()
        self.counter = 0
        self.sessions: list[str] = []
        self.sends: dict[str, tuple[str, str, str]] = {}  # op -> (session, text, invocation)
        self.hosts: list[OpenHost] = []
        self.agents = {"helper": marking_agent()}
        self.loop.run(self._open_hosts)
        self.loop.run(self._create)

    def teardown(self) -> None:
        try:
            self.loop.run(self._close_hosts)
        finally:
            self.loop.close()
            self._temp.cleanup()

    # -- hosts ------------------------------------------------------------------------
    def _options(self, name: str) -> dict[str, Any]:
        options: dict[str, Any] = {"root": self.base / name, "agents": self.agents, "titles": True}
        if self.dsn is not None:
            options.update(store=self.dsn, scale_out=FAST)
        return options

    async def _open_hosts(self) -> None:
        self.hosts.append(await OpenHost.start(self.loop.nursery, **self._options("a")))
        if self.dsn is not None:  # a second Host follows the same sessions
            self.hosts.append(await OpenHost.start(self.loop.nursery, **self._options("b")))

    async def _close_hosts(self) -> None:
        for opened in self.hosts:
            await opened.close()
        self.hosts.clear()

    @property
    def host(self) -> Host:
        return self.hosts[0].host

    async def _create(self) -> None:
        self.counter += 1
        created = await self.host.create_session(
            "helper", self.base / "work", operation=f"create-{self.counter}"
        )
        await self._known(created.session.id)
        self.sessions.append(created.session.id)

    async def _known(self, session_id: str) -> None:
        """Wait until every Host knows the session (a follower learns it by the log)."""
        for sessions in [opened.host._registry for opened in self.hosts]:
            await until(functools.partial(operator.contains, sessions, session_id))

    # -- rules ------------------------------------------------------------------------
    @rule()
    def create(self) -> None:
        if len(self.sessions) < 3:
            self.loop.run(self._create)

    @rule(data=st.data(), retry=st.booleans(), text=st.sampled_from(["a", "b"]))
    def send(self, data: st.DataObject, retry: bool, text: str) -> None:
        session_id = data.draw(st.sampled_from(self.sessions))
        if retry and self.sends:
            operation = data.draw(st.sampled_from(sorted(self.sends)))
            session_id, text, _ = self.sends[operation]
        else:
            self.counter += 1
            operation = f"send-{self.counter}"

        host = data.draw(st.sampled_from(self.hosts)).host

        async def step() -> None:
            receipt = await host.send(session_id, text, operation=operation)
            known = self.sends.setdefault(operation, (session_id, text, receipt.invocation_id))
            assert known[2] == receipt.invocation_id, "a retried send admitted again"

        self.loop.run(step)

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        if not self.sends:
            return
        operation = data.draw(st.sampled_from(sorted(self.sends)))
        session_id, _, invocation = self.sends[operation]

        async def step() -> None:
            first = await self.host.stop(session_id, invocation, operation=f"stop-{operation}")
            again = await self.host.stop(session_id, invocation, operation=f"stop-{operation}")
            assert again == first

        self.loop.run(step)

    @rule(data=st.data(), approve=st.booleans())
    def answer(self, data: st.DataObject, approve: bool) -> None:
        host = data.draw(st.sampled_from(self.hosts)).host

        async def step() -> None:
            for session_id in self.sessions:
                pending = (await host.pending_interactions(session_id)).interactions
                for interaction in pending[:1]:
                    response = ApproveResponse() if approve else DenyResponse(reason="no")
                    self.counter += 1
                    # Settled meanwhile when its turn was stopped or ended.
                    with contextlib.suppress(InteractionSettled):
                        await host.respond(
                            session_id, interaction.id, response, operation=f"r-{self.counter}"
                        )

        self.loop.run(step)

    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(self.sessions))
        self.counter += 1
        operation = f"fork-{self.counter}"

        async def step() -> None:
            revision = self.host._registry.get(session_id).revision
            try:
                forked = await self.host.fork(session_id, revision=revision, operation=operation)
            except ForkRefused:
                return
            await self._known(forked.session.id)

        if len(self.host._registry) < 6:
            self.loop.run(step)

    @rule(data=st.data())
    def start_worker(self, data: st.DataObject) -> None:
        session_id = data.draw(st.sampled_from(self.sessions))
        self.counter += 1
        operation = f"worker-{self.counter}"

        async def step() -> None:
            started = await self.host.start_worker(
                session_id,
                from_wire(AgentWorker, {"kind": "agent", "agent": "helper"}),
                "work",
                operation=operation,
            )
            await self._known(started.worker_id)

        if len(self.host._registry) < 6:
            self.loop.run(step)

    @rule(steps=st.integers(min_value=0, max_value=60))
    def run_a_while(self, steps: int) -> None:
        async def step() -> None:
            for _ in range(steps):
                await trio.lowlevel.checkpoint()

        self.loop.run(step)

    @rule()
    def restart(self) -> None:
        """A graceful restart of every Host: no answer changes."""

        async def step() -> None:
            before = {sid: await self._answers(self.host, sid) for sid in self.sessions}
            leader = self.host
            await self._close_hosts()
            closed = {sid: s.log for sid, s in leader._registry.items()}
            await self._open_hosts()
            async with self._fresh_store() as fresh:
                for log in closed.values():
                    # What the closed Host held is the log through its revision: the
                    # reopened Host starts from exactly that (its runners may go on).
                    assert await rebuilt(fresh, log, log.revision) == log.snapshot()
            for session_id, answers in before.items():
                now = await self._answers(self.host, session_id)
                for invocation, result in answers.items():
                    if result is not None:  # finished before: the same answer now
                        assert now[invocation] == result

        self.loop.run(step)

    @rule()
    def failover(self) -> None:
        """PostgreSQL: the first Host closes; the one following it carries on (it takes
        the leases) and a new Host follows it."""
        if self.dsn is None:
            return

        async def step() -> None:
            leaving = self.hosts.pop(0)
            await leaving.close()
            self.counter += 1
            follower = await OpenHost.start(self.loop.nursery, **self._options(f"h{self.counter}"))
            self.hosts.append(follower)
            for session_id in self.host._registry.items():
                await self._known(session_id[0])

        self.loop.run(step)

    @rule(steps=st.integers(min_value=0, max_value=40))
    def crash(self, steps: int) -> None:
        """``kill -9`` at a random point: what a copy of the store says then, a new Host
        recovers, settling every started invocation once and changing no finished one."""
        if self.dsn is not None:
            return  # PostgreSQL's crash trials kill real Host processes (test_failover)

        async def step() -> None:
            for _ in range(steps):
                await trio.lowlevel.checkpoint()
            logs = await logs_of(self.host)
            finished = {i: log.outcomes[i] for log in logs.values() for i in log.finished}
            copy = self.base / f"crash-{self.counter}"
            self.counter += 1
            copy.mkdir()
            await trio.to_thread.run_sync(
                _copy_store, self.base / "a" / "host.db", copy / "host.db"
            )
            agents = {"helper": marking_agent()}  # its own script: the live one runs on
            async with Host.open(copy, agents=agents) as recovered:
                async with open_sqlite_store(str(copy / "host.db")) as fresh:
                    for session in recovered._registry:
                        async with session.lock:
                            log = session.log
                            # Only this Host's own runner may have started something.
                            ours = log.running if session.cancellation is not None else None
                            left = [i for i in log.interrupted() if i != ours]
                            assert left == [], "recovery left work started"
                            assert log.snapshot() == await rebuilt(fresh, log, log.revision)
                            for invocation in log.finished & finished.keys():
                                assert log.outcomes[invocation] == finished[invocation]

        self.loop.run(step)

    # -- the differential invariant -----------------------------------------------------
    @invariant()
    def live_state_is_the_log(self) -> None:
        self.loop.run(self._compare)

    async def _compare(self) -> None:
        """Each Host's state of each session equals the log rebuilt through that state's
        revision (under the session's lock: no commit is half applied); a follower
        reaches the leader's revision."""
        async with self._fresh_store() as fresh:
            newest: dict[str, int] = {}
            for opened in self.hosts:
                for session_id, session in opened.host._registry.items():
                    async with session.lock:
                        live = session.log.snapshot()
                        assert live == await rebuilt(fresh, session.log, session.revision)
                        newest[session_id] = max(newest.get(session_id, 0), session.revision)
            for opened in self.hosts[1:]:
                for session_id, revision in newest.items():
                    await self._caught_up(opened.host, session_id, revision)

    async def _caught_up(self, host: Host, session_id: str, revision: int) -> None:
        """A follower applies what it is notified of (or finds by its catch-up query)."""
        await until(
            lambda: (
                session_id in host._registry and host._registry.get(session_id).revision >= revision
            )
        )

    def _fresh_store(self) -> Any:
        if self.dsn is None:
            return open_sqlite_store(str(self.base / "a" / "host.db"))
        return open_postgres_store(self.dsn)

    async def _answers(self, host: Host, session_id: str) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for session, _, invocation in self.sends.values():
            if session == session_id:
                answers[invocation] = await host.execute_result(session_id, invocation)
        return answers


def _copy_store(source: Path, target: Path) -> None:
    """A consistent copy of a live SQLite store: what a crash at this instant leaves."""
    with sqlite3.connect(source) as src, sqlite3.connect(target) as dst:
        src.backup(dst)
    os.chmod(target, 0o600)


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_live_state_equals_the_rebuilt_log_on_sqlite() -> None:
    run_state_machine_as_test(HostLog, settings=SETTINGS)


def test_live_and_follower_state_equal_the_rebuilt_log_on_postgres(
    postgres_server: PostgresServer,
) -> None:
    class OnPostgres(HostLog):
        def __init__(self) -> None:
            self.dsn = postgres_server.create_database()
            super().__init__()

    run_state_machine_as_test(OnPostgres, settings=SETTINGS)
