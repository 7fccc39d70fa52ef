"""Live drafts on watch: the running answer streams to live watchers before it commits,
in process and over the Host's WebSocket (the ``open_host`` fixture), and never becomes
history."""

from __future__ import annotations

import json
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
from emelex.service import Host, HostClient
from emelex.service.transport._websocket import WebSocket
from emelex.testing import Fail, Say, ScriptedModel, Think, Wait
from tests.service.conftest import OpenHost, served
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


def _drafts_in(frames: list[dict[str, Any]]) -> list[dict[str, Any]]:
    updates = [u for f in frames for u in ([f["update"]] if "update" in f else f["updates"])]
    return [u for u in updates if u["kind"] == "draft"]


async def _frames(
    target: str, tmp_path: Path, model: PacedModel, text: str, thinking: str
) -> list[dict[str, Any]]:
    """The raw frames of a subscription at ``target`` (TCP, token in the first frame)
    until its drafts add up to ``text`` and ``thinking``, read while the model holds."""
    (tmp_path / "root").mkdir(parents=True)
    async with served(tmp_path / "root", {"helper": helper(model)}, tcp=True) as serving:
        assert serving.url is not None and serving.token_path is not None
        token = serving.token_path.read_text().strip()
        async with HostClient.connect(serving.url, token=token) as client:
            session = (await client.create_session("helper", tmp_path, operation="c")).session
        address, port = serving.url.removeprefix("http://").split(":")
        stream = await trio.open_tcp_stream(address, int(port))
        socket = await WebSocket.open(
            stream, host=address, target=target, headers=[], max_message=1 << 20
        )
        frames: list[dict[str, Any]] = []
        try:
            await socket.send_text(json.dumps({"token": token}))
            await socket.send_text(json.dumps({"sessionId": session.id, "after": None}))
            async with HostClient.connect(serving.url, token=token) as client:
                await client.send(session.id, "hi", operation="s1")
            with trio.fail_after(30):
                await model.holding.wait()
                while True:
                    drafts = _drafts_in(frames)
                    if "".join(d["text"] for d in drafts) == text and (
                        "".join(d["thinking"] for d in drafts) == thinking
                    ):
                        break
                    received = await socket.receive_text()
                    assert received is not None
                    frames.append(json.loads(received))
        finally:
            model.release.set()
            await socket.aclose()
        return frames


async def test_the_draft_frame_on_the_wire(tmp_path: Path) -> None:
    model = PacedModel(ScriptedModel([[Think("<b>hm</b>"), Say("Héllo ✓ "), Say("end")]]), 2)
    frames = await _frames("/v1/sub/watchLive", tmp_path, model, "Héllo ✓ ", "<b>hm</b>")
    assert all(set(f) == {"update"} for f in frames)
    drafts = _drafts_in(frames)
    invocation = drafts[0]["invocationId"]
    text_at = thinking_at = 0
    for draft in drafts:
        assert draft == {
            "kind": "draft",
            "invocationId": invocation,
            "step": 0,
            "textOffset": text_at,
            "text": draft["text"],
            "thinkingOffset": thinking_at,
            "thinking": draft["thinking"],
        }
        text_at += len(draft["text"])
        thinking_at += len(draft["thinking"])
    # The same subscription with batched frames carries the same updates.
    model = PacedModel(ScriptedModel([[Say("one "), Say("two")]]), 1)
    frames = await _frames("/v1/sub/watchLive?batch=1", tmp_path / "b", model, "one ", "")
    assert all(set(f) == {"updates"} for f in frames)
    assert [(u["textOffset"], u["text"]) for u in _drafts_in(frames)] == [(0, "one ")]
