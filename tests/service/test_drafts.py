"""Live drafts on watch: the running answer streams to live watchers before it commits,
in process and over the Host's WebSocket (the ``open_host`` fixture), and never becomes
history."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import (
    DraftCleared,
    DraftUpdated,
    QueueChanged,
    RowsPublished,
    WatchEnded,
    WatchUpdate,
)
from emelex.service import Host
from emelex.testing import Fail, Say, ScriptedModel, Think, Wait
from tests.service.conftest import OpenHost
from tests.service.paced import PacedModel


def helper(model: Any) -> Agent:
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    return builder.approver(DenyAll()).build()


async def next_update(updates: AsyncIterator[WatchUpdate]) -> WatchUpdate:
    with trio.fail_after(30):
        return await updates.__anext__()


async def read_draft(
    updates: AsyncIterator[WatchUpdate], text: str, thinking: str, seen: list[WatchUpdate]
) -> None:
    """Read until the drafts received add up to ``text`` and ``thinking`` (offsets
    contiguous); every update read goes to ``seen``."""
    got_text, got_thinking = "", ""
    while (got_text, got_thinking) != (text, thinking):
        update = await next_update(updates)
        seen.append(update)
        if isinstance(update, DraftUpdated):
            assert update.text_offset == len(got_text)
            assert update.thinking_offset == len(got_thinking)
            got_text += update.text
            got_thinking += update.thinking
        assert not isinstance(update, WatchEnded), update


async def read_until_idle(
    updates: AsyncIterator[WatchUpdate],
    seen: list[WatchUpdate],
    mark: Callable[[WatchUpdate], bool],
) -> None:
    """Read until an empty queue follows an update ``mark`` accepts (waiting queue
    snapshots are replaced by newer ones, so "it ran" is told by ``mark``)."""
    marked = False
    while True:
        update = await next_update(updates)
        seen.append(update)
        assert not isinstance(update, WatchEnded), update
        marked = marked or mark(update)
        if marked and isinstance(update, QueueChanged) and not update.queue.entries:
            return


def cleared(update: WatchUpdate) -> bool:
    return isinstance(update, DraftCleared)


def answered(body: str) -> Callable[[WatchUpdate], bool]:
    return lambda u: body in assistant_bodies([u])


def assistant_bodies(updates: list[WatchUpdate]) -> list[str]:
    return [
        r.body
        for u in updates
        if isinstance(u, RowsPublished)
        for r in u.rows
        if r.role == "assistant"
    ]


async def test_a_live_watcher_sees_the_answer_stream_before_it_commits(
    tmp_path: Path, open_host: OpenHost
) -> None:
    scripted = ScriptedModel(
        [
            [Think("Looking."), Say("Hello "), Say("from "), Say("the Host.")],
            [Say("Second.")],
        ]
    )
    model = PacedModel(scripted, hold_after=3)
    async with open_host(tmp_path / "root", agents={"helper": helper(model)}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        live_seen: list[WatchUpdate] = []
        plain_seen: list[WatchUpdate] = []
        async with (
            host.watch(session.id, live=True) as live,
            host.watch(session.id) as plain,
        ):
            first = await host.send(session.id, "hi", operation="s1")
            with trio.fail_after(30):
                await model.holding.wait()
            # Held after three deltas: the watcher has them, nothing has committed.
            await read_draft(live, "Hello from ", "Looking.", live_seen)
            assert assistant_bodies(live_seen) == []
            drafts = [u for u in live_seen if isinstance(u, DraftUpdated)]
            assert {(d.invocation_id, d.step) for d in drafts} == {(first.invocation_id, 0)}
            history = await host.history(session.id)
            assert [r.role for r in history.rows if r.role == "assistant"] == []

            # A live watcher joining mid-answer gets the draft so far, from offset 0.
            late_seen: list[WatchUpdate] = []
            async with host.watch(session.id, live=True) as late:
                await read_draft(late, "Hello from ", "Looking.", late_seen)
            first_draft = next(u for u in late_seen if isinstance(u, DraftUpdated))
            assert (first_draft.text_offset, first_draft.thinking_offset) == (0, 0)

            model.release.set()
            await read_until_idle(live, live_seen, cleared)
            await read_until_idle(plain, plain_seen, answered("Hello from the Host."))

        # The committed row supersedes the draft: rows first, then the clear, then no
        # more drafts of that invocation.
        assert assistant_bodies(live_seen) == ["Hello from the Host."]
        rows_at = next(i for i, u in enumerate(live_seen) if assistant_bodies([u]))
        clears = [(i, u) for i, u in enumerate(live_seen) if isinstance(u, DraftCleared)]
        assert [(u.invocation_id, u.step, u.reason) for _, u in clears] == [
            (first.invocation_id, None, "completed")
        ]
        assert clears[0][0] > rows_at
        assert not any(isinstance(u, DraftUpdated) for u in live_seen[rows_at:])
        text = "".join(u.text for u in live_seen if isinstance(u, DraftUpdated))
        assert "Hello from the Host.".startswith(text) and text.startswith("Hello from ")
        # A watch that did not opt in never sees a draft.
        assert not any(isinstance(u, DraftUpdated | DraftCleared) for u in plain_seen)
        assert assistant_bodies(plain_seen) == ["Hello from the Host."]

        # Drafts are not history: the stored rows are the committed ones only.
        rows = (await host.history(session.id)).rows
        assert [(r.role, r.body) for r in rows] == [
            ("user", "hi"),
            ("assistant", "Hello from the Host."),
        ]

        # Resuming after the commit replays rows, never the old draft; the next turn's
        # draft is a new invocation's, from offset 0.
        resumed: list[WatchUpdate] = []
        async with host.watch(session.id, after=None, live=True) as again:
            for _ in range(3):  # queue, interactions, the catch-up rows
                resumed.append(await next_update(again))
            second = await host.send(session.id, "again", operation="s2")
            await read_until_idle(again, resumed, answered("Second."))
        assert assistant_bodies(resumed) == ["Hello from the Host.", "Second."]
        later = [u for u in resumed if isinstance(u, DraftUpdated)]
        assert {u.invocation_id for u in later} <= {second.invocation_id}
        assert [u.text for u in later] in ([], ["Second."])
        assert [u.reason for u in resumed if isinstance(u, DraftCleared)] in ([], ["completed"])


async def test_a_stop_clears_the_draft(tmp_path: Path, open_host: OpenHost) -> None:
    model = ScriptedModel([[Say("Working"), Wait(3600)]])
    async with open_host(tmp_path / "root", agents={"helper": helper(model)}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        seen: list[WatchUpdate] = []
        async with host.watch(session.id, live=True) as live:
            receipt = await host.send(session.id, "work", operation="s1")
            await read_draft(live, "Working", "", seen)
            await host.stop(session.id, receipt.invocation_id, operation="stop-1")
            while not any(isinstance(u, DraftCleared) for u in seen):
                seen.append(await next_update(live))
        clears = [u for u in seen if isinstance(u, DraftCleared)]
        assert [(u.invocation_id, u.step, u.reason) for u in clears] == [
            (receipt.invocation_id, None, "stopped")
        ]


async def test_a_failed_model_step_clears_its_draft(tmp_path: Path, open_host: OpenHost) -> None:
    scripted = ScriptedModel([[Say("partial"), Fail(RuntimeError("upstream broke"))]])
    model = PacedModel(scripted, hold_after=1)
    async with open_host(tmp_path / "root", agents={"helper": helper(model)}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        seen: list[WatchUpdate] = []
        async with host.watch(session.id, live=True) as live:
            receipt = await host.send(session.id, "go", operation="s1")
            await read_draft(live, "partial", "", seen)
            model.release.set()  # now the step fails
            await read_until_idle(live, seen, cleared)
        clears = [(u.invocation_id, u.step, u.reason) for u in seen if isinstance(u, DraftCleared)]
        # The step's own clear; the turn's end finds nothing left to clear.
        assert clears == [(receipt.invocation_id, 0, "failed")]
        assert assistant_bodies(seen) == []


async def test_a_slow_watcher_never_holds_the_stream_and_gets_drafts_coalesced(
    tmp_path: Path,
) -> None:
    deltas = 3000
    model = PacedModel(ScriptedModel([[Say("x")] * deltas]), hold_after=deltas)
    agents = {"helper": helper(model)}
    async with Host.open(tmp_path / "host", agents=agents, watch_buffer=4) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        fast_seen: list[WatchUpdate] = []
        async with (
            host.watch(session.id, live=True) as slow,
            host.watch(session.id, live=True) as fast,
        ):
            await host.send(session.id, "many", operation="s1")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_draft, fast, "x" * deltas, "", fast_seen)
                # The slow watcher reads nothing, yet the stream reaches its end.
                with trio.fail_after(30):
                    await model.holding.wait()
            # The fast one kept up (one small update per delta, or a few more each).
            fast_drafts = [u for u in fast_seen if isinstance(u, DraftUpdated)]
            assert len(fast_drafts) > 1
            # The slow one: its bounded buffer held one mark, not 3,000 deltas; the
            # whole draft comes in chunks of at most MAX_DRAFT_CHUNK_CHARS, and it is
            # not dropped as lagged.
            slow_seen: list[WatchUpdate] = []
            await read_draft(slow, "x" * deltas, "", slow_seen)
            slow_drafts = [u for u in slow_seen if isinstance(u, DraftUpdated)]
            assert [len(u.text) for u in slow_drafts] == [deltas]
            model.release.set()
            await read_until_idle(slow, slow_seen, answered("x" * deltas))
            assert assistant_bodies(slow_seen) == ["x" * deltas]
            assert not any(isinstance(u, WatchEnded) for u in slow_seen)
