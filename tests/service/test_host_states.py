"""A hypothesis state machine over the Host: sends, stops, answers, forks, history and
watch reads, each in a Host opened for that step alone, so every step is also a restart.

Invariants checked after every step: receipts are honoured (a retried operation returns
its original outcome), nothing is admitted twice, history is whole turns only, pages and
watches see every row once in order, and after a restart no work or question is left
hanging from a previous Host.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path
from typing import Any

import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    InteractionsChanged,
    Position,
    QueueChanged,
    RowsPublished,
    WatchEnded,
)
from emelex.service import ForkRefused, Host, InteractionSettled, UnknownInvocation
from emelex.store import StoredEvent, open_sqlite_store
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool


@tool(needs_approval=True)
async def mark(text: str) -> str:
    """Mark something.

    Args:
        text: What to mark.
    """
    return f"marked {text}"


def host_agent() -> Agent:
    rounds: list[list[Any]] = []
    for n in range(40):
        rounds.append([Call("mark", {"text": f"m{n}"})])
        rounds.append([Say(f"answer {n}")])
    builder = Agent.builder().name("helper").instructions("Mark.").model(ScriptedModel(rounds))
    return builder.tool(mark).approver(DenyAll()).build()


class HostMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self._temp = tempfile.TemporaryDirectory()
        self.base = Path(self._temp.name)
        (self.base / "work").mkdir()
        self.root = self.base / "host"
        self.session_id = ""
        self.sends: dict[str, tuple[str, str]] = {}  # operation -> (text, invocation)
        self.forks: list[str] = []
        self.counter = 0
        self.run(self._create)

    def teardown(self) -> None:
        self._temp.cleanup()

    def run(self, step: Any, *args: Any) -> Any:
        async def in_a_host() -> Any:
            async with Host.open(self.root, agents={"helper": host_agent()}) as host:
                with trio.fail_after(30):
                    return await step(host, *args)

        return trio.run(in_a_host)

    async def _create(self, host: Host) -> None:
        created = await host.create_session("helper", self.base / "work", operation="create")
        self.session_id = created.session.id

    # -- rules ------------------------------------------------------------------------
    @rule(text=st.sampled_from(["a", "b", "c"]), retry=st.booleans())
    def send(self, text: str, retry: bool) -> None:
        if retry and self.sends:
            operation = sorted(self.sends)[0]
            text = self.sends[operation][0]
        else:
            self.counter += 1
            operation = f"send-{self.counter}"

        async def step(host: Host) -> None:
            receipt = await host.send(self.session_id, text, operation=operation)
            known = self.sends.setdefault(operation, (text, receipt.invocation_id))
            assert known[1] == receipt.invocation_id, "a retried send admitted again"
            await self._settle(host, answer=True)

        self.run(step)

    @rule(approve=st.booleans())
    def answer_questions(self, approve: bool) -> None:
        async def step(host: Host) -> None:
            await self._settle(host, answer=approve)

        self.run(step)

    @rule(data=st.data())
    def stop(self, data: st.DataObject) -> None:
        if not self.sends:
            return
        operation = data.draw(st.sampled_from(sorted(self.sends)))
        invocation = self.sends[operation][1]

        async def step(host: Host) -> None:
            try:
                first = await host.stop(self.session_id, invocation, operation=f"stop-{operation}")
            except UnknownInvocation:
                raise AssertionError("an admitted invocation was forgotten") from None
            again = await host.stop(self.session_id, invocation, operation=f"stop-{operation}")
            assert again == first

        self.run(step)

    @rule()
    def fork(self) -> None:
        self.counter += 1
        operation = f"fork-{self.counter}"

        async def step(host: Host) -> None:
            revision = (await host.history(self.session_id, limit=1)).through
            try:
                forked = await host.fork(self.session_id, revision=revision, operation=operation)
            except ForkRefused:
                return
            assert await host.fork_receipt(self.session_id, operation=operation) == forked
            source = [r.body for r in await self._all_rows(host, self.session_id, revision)]
            copied = [r.body for r in await self._all_rows(host, forked.session.id, None)]
            assert copied == source[: len(copied)]
            self.forks.append(forked.session.id)

        self.run(step)

    @rule(limit=st.integers(min_value=1, max_value=5))
    def read_history_and_watch(self, limit: int) -> None:
        async def step(host: Host) -> None:
            everything = await self._all_rows(host, self.session_id, None)
            paged: list[Position] = []
            page = await host.history(self.session_id, limit=limit)
            fence = page.through
            paged += [r.position for r in page.rows]
            while page.next_after is not None:
                page = await host.history(
                    self.session_id, through=fence, after=page.next_after, limit=limit
                )
                paged += [r.position for r in page.rows]
            assert paged == [r.position for r in everything]
            assert paged == sorted(set(paged))
            # A watch from the middle sees exactly the rows after its cursor.
            cursor = paged[len(paged) // 2] if paged else None
            expected = [p for p in paged if cursor is None or p > cursor]
            seen: list[Position] = []
            if expected:
                async with host.watch(self.session_id, after=cursor) as updates:
                    async for update in updates:
                        if isinstance(update, WatchEnded):
                            raise AssertionError(f"the watch ended: {update.reason}")
                        if isinstance(update, RowsPublished):
                            seen += [r.position for r in update.rows]
                            if seen[-1] >= expected[-1]:
                                break
            assert seen[: len(expected)] == expected

        self.run(step)

    # -- helpers ----------------------------------------------------------------------
    async def _settle(self, host: Host, *, answer: bool) -> None:
        """Answer questions until the queue is empty (bounded by the step's deadline).

        Driven by the watch: each pending-interaction change is answered as it arrives,
        and the empty queue it reports ends the wait, so no step polls.
        """
        answered: set[str] = set()
        if not (await host.queue(self.session_id)).entries:
            return
        async with host.watch(self.session_id) as updates:
            async for update in updates:
                if isinstance(update, WatchEnded):
                    raise AssertionError(f"the watch ended: {update.reason}")
                if isinstance(update, QueueChanged) and not update.queue.entries:
                    return
                if not isinstance(update, InteractionsChanged):
                    continue
                for interaction in update.pending:
                    if interaction.id in answered:
                        continue
                    answered.add(interaction.id)
                    response = ApproveResponse() if answer else DenyResponse(reason="no")
                    with contextlib.suppress(InteractionSettled):  # settled by a stop meanwhile
                        await host.respond(
                            self.session_id,
                            interaction.id,
                            response,
                            operation=f"r-{interaction.id}",
                        )

    @staticmethod
    async def _all_rows(host: Host, session_id: str, through: int | None) -> list[Any]:
        rows: list[Any] = []
        page = await host.history(session_id, through=through, limit=500)
        rows += page.rows
        while page.next_after is not None:
            page = await host.history(
                session_id, through=page.through, after=page.next_after, limit=500
            )
            rows += page.rows
        return rows

    # -- invariants -------------------------------------------------------------------
    @invariant()
    def the_log_is_consistent(self) -> None:
        async def check() -> None:
            async with open_sqlite_store(str(self.root / "host.db")) as store:
                events: list[StoredEvent] = []
                while batch := await store.events_after(
                    self.session_id, events[-1].sequence if events else 0, limit=1000
                ):
                    events += batch
                page = await store.history_page(self.session_id, limit=1000, include_internal=True)
            admitted = Counter(e.payload["operation"] for e in events if e.kind == "queue.admitted")
            assert all(n == 1 for n in admitted.values()), "an operation was admitted twice"
            settled = {e.turn_id for e in events if e.kind == "turn.settled"}
            assert {r.turn_id for r in page.rows} <= settled, "a turn is in history unsettled"
            started = {e.payload["invocationId"] for e in events if e.kind == "queue.started"}
            finished = {e.payload["invocationId"] for e in events if e.kind == "queue.finished"}
            # Each step's Host closed: nothing it started may be left unsettled.
            assert started <= finished, "a started invocation was never settled"
            asked = {e.payload["id"] for e in events if e.kind == "interaction.requested"}
            resolved = {e.payload["id"] for e in events if e.kind == "interaction.resolved"}
            assert asked == resolved, "a question is left hanging after a restart"

        trio.run(check)


HostMachine.TestCase.settings = settings(
    max_examples=15, stateful_step_count=8, deadline=None, derandomize=True
)
TestHostStates = HostMachine.TestCase
