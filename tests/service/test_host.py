"""The in-process Host: sessions, receipts, the work queue, interactions, watch, restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    InteractionsChanged,
    QueueChanged,
    RowsPublished,
    WatchEnded,
    WatchUpdate,
)
from emelex.service import (
    Host,
    InteractionSettled,
    OperationConflict,
    QueueFull,
    UnknownAgent,
    UnknownInvocation,
    UnknownSession,
)
from emelex.store import NewEvent, open_sqlite_store
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note.

    Args:
        text: What to note.
    """
    NOTES.append(text)
    return f"noted {text}"


NOTES: list[str] = []


def agent(*rounds: list[Any]) -> Agent:
    model = ScriptedModel([list(r) for r in rounds])
    # The Host answers approvals through interactions, whatever approver the agent names.
    builder = Agent.builder().name("helper").instructions("Help.").model(model).tool(note)
    return builder.approver(DenyAll()).build()


async def until_idle(host: Host, session_id: str) -> list[WatchUpdate]:
    """Updates seen until the session's queue is empty."""
    seen: list[WatchUpdate] = []
    with trio.fail_after(30):
        while True:  # a lagged watch is resumed, as a client would
            async with host.watch(session_id) as updates:
                async for update in updates:
                    seen.append(update)
                    if isinstance(update, QueueChanged) and not update.queue.entries:
                        return seen
                    if isinstance(update, WatchEnded) and update.reason != "lagged":
                        raise AssertionError(f"the watch ended: {update}")


async def until_pending(host: Host, session_id: str) -> str:
    async with host.watch(session_id) as updates:
        async for update in updates:
            if isinstance(update, InteractionsChanged) and update.pending:
                return update.pending[0].id
    raise AssertionError("no interaction arrived")


async def test_create_session_is_idempotent_by_operation(tmp_path: Path) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        first = await host.create_session("helper", tmp_path, operation="create-1")
        again = await host.create_session("helper", tmp_path, operation="create-1")
        assert again == first
        assert first.receipt.action == "createSession"
        with pytest.raises(OperationConflict):
            await host.create_session("helper", tmp_path, operation="create-1", title="other")
        with pytest.raises(UnknownAgent):
            await host.create_session("nobody", tmp_path, operation="create-2")
        with pytest.raises(UnknownSession):
            await host.history("s-missing")
        assert [s.id for s in host.sessions()] == [first.session.id]


async def test_send_runs_a_turn_and_history_pages_show_its_rows(tmp_path: Path) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": agent([Say("hello back")])}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        sent = await host.send(session.id, "hello", operation="send-1")
        assert await host.send(session.id, "hello", operation="send-1") == sent
        with pytest.raises(OperationConflict):
            await host.send(session.id, "something else", operation="send-1")
        await until_idle(host, session.id)
        page = await host.history(session.id, limit=1)
        assert [r.role for r in page.rows] == ["user"] and page.next_after is not None
        rest = await host.history(session.id, through=page.through, after=page.next_after)
        assert [(r.role, r.body) for r in rest.rows] == [("assistant", "hello back")]
        assert rest.next_after is None
        stop = await host.stop(session.id, sent.invocation_id, operation="stop-1")
        assert stop.outcome == "alreadyFinished"
        with pytest.raises(UnknownInvocation):
            await host.stop(session.id, "never-sent", operation="stop-2")
        # Retries after the turn finished apply nothing new.
        fence = (await host.history(session.id)).through
        assert await host.send(session.id, "hello", operation="send-1") == sent
        assert await host.stop(session.id, sent.invocation_id, operation="stop-1") == stop
        assert (await host.history(session.id)).through == fence
        assert host.queue(session.id).entries == ()


async def test_approvals_are_durable_interactions_answered_once(tmp_path: Path) -> None:
    NOTES.clear()
    rounds = agent([Call("note", {"text": "milk"})], [Say("done")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note milk", operation="s1")
        interaction_id = await until_pending(host, session.id)
        pending = await host.pending_interactions(session.id)
        (interaction,) = pending.interactions
        assert interaction.tool_call.name == "note"
        assert interaction.tool_call.arguments == {"text": "milk"}
        assert NOTES == []
        answer = await host.respond(
            session.id, interaction_id, ApproveResponse(), operation="answer-1"
        )
        assert answer.interaction.resolution is not None
        assert answer.interaction.resolution.outcome == "approved"
        retried = await host.respond(
            session.id, interaction_id, ApproveResponse(), operation="answer-1"
        )
        assert retried == answer
        with pytest.raises(InteractionSettled):
            await host.respond(
                session.id, interaction_id, DenyResponse(reason="no"), operation="answer-2"
            )
        await until_idle(host, session.id)
        assert NOTES == ["milk"]
        rows = (await host.history(session.id)).rows
        assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]
        assert rows[2].tool_name == "note" and rows[2].body == "noted milk"
        assert (await host.interaction(session.id, interaction_id)).state == "resolved"


async def test_stop_removes_queued_work_and_settles_a_waiting_turn(tmp_path: Path) -> None:
    NOTES.clear()
    rounds = agent([Call("note", {"text": "never"})], [Say("second")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        first = await host.send(session.id, "one", operation="s1")
        second = await host.send(session.id, "two", operation="s2")
        interaction_id = await until_pending(host, session.id)
        queued = await host.stop(session.id, second.invocation_id, operation="x2")
        assert queued.outcome == "removedFromQueue"
        running = await host.stop(session.id, first.invocation_id, operation="x1")
        assert running.outcome == "stopping"
        assert await host.stop(session.id, first.invocation_id, operation="x1") == running
        await until_idle(host, session.id)
        interaction = await host.interaction(session.id, interaction_id)
        assert interaction.resolution is not None
        assert (interaction.resolution.outcome, interaction.resolution.by) == (
            "interrupted",
            "stop",
        )
        assert NOTES == []
        # Nothing of the stopped turn was committed (no tool ran: it rolled back).
        assert (await host.history(session.id)).rows == ()


async def test_a_full_queue_admits_nothing(tmp_path: Path) -> None:
    rounds = agent([Call("note", {"text": "a"})])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}, queue_capacity=2) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "one", operation="s1")
        await host.send(session.id, "two", operation="s2")
        with pytest.raises(QueueFull):
            await host.send(session.id, "three", operation="s3")
        assert [e.operation for e in host.queue(session.id).entries] == ["s1", "s2"]


async def test_search_pages_name_the_original_field(tmp_path: Path) -> None:
    rounds = agent([Say("The Straße is long; strasse too.")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "Which STRASSE?", operation="s1")
        await until_idle(host, session.id)
        page = await host.search(session.id, "strasse")
        assert [(h.position.source_sequence, h.field, h.start, h.end) for h in page.hits] == [
            (4, "body", 6, 13),  # the user row; simple folding leaves "ß" alone
            (5, "body", 20, 27),
        ]
        exact = await host.search(session.id, "strasse", case_sensitive=True)
        assert [(h.start, h.end) for h in exact.hits] == [(20, 27)]
        assert (await host.search(session.id, "stra", whole_word=True)).hits == ()
        assert page.next_after is None


async def test_a_lagging_watcher_is_dropped_and_resumes_without_gap(tmp_path: Path) -> None:
    rounds = agent(*[[Say(f"answer {n}")] for n in range(4)])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}, watch_buffer=2) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        async with host.watch(session.id) as updates:
            first = await updates.__anext__()
            assert isinstance(first, QueueChanged)
            for n in range(4):  # the watcher reads nothing while four turns commit
                await host.send(session.id, f"q{n}", operation=f"s{n}")
            await until_idle(host, session.id)
            rest = [u async for u in updates]
        end = rest[-1]
        assert isinstance(end, WatchEnded) and end.reason == "lagged"
        bodies = [r.body for u in rest if isinstance(u, RowsPublished) for r in u.rows]
        async with host.watch(session.id, after=end.resume_after) as resumed:
            async for update in resumed:
                if isinstance(update, RowsPublished):
                    bodies.extend(r.body for r in update.rows)
                    if update.rows[-1].body == "answer 3":
                        break
        assert bodies == [text for n in range(4) for text in (f"q{n}", f"answer {n}")]


async def test_restart_settles_an_interrupted_turn_and_keeps_queued_work(tmp_path: Path) -> None:
    root = tmp_path / "host"
    async with Host.open(root, agents={"helper": agent()}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
    # What a killed Host leaves: one invocation started, one still queued.
    async with open_sqlite_store(str(root / "host.db")) as store:
        for number in (1, 2):
            await store.append_events(
                session.id,
                [
                    NewEvent(
                        "queue.admitted",
                        None,
                        {"invocationId": f"inv-{number}", "operation": f"s{number}", "text": "hi"},
                    )
                ],
            )
        await store.append_events(
            session.id, [NewEvent("queue.started", None, {"invocationId": "inv-1"})]
        )
    rounds = agent([Say("after restart")])
    async with Host.open(root, agents={"helper": rounds}) as host:
        await until_idle(host, session.id)
        rows = (await host.history(session.id)).rows
        assert [(r.role, r.body) for r in rows] == [("user", "hi"), ("assistant", "after restart")]
        stopped = await host.stop(session.id, "inv-1", operation="late-stop")
        assert stopped.outcome == "alreadyFinished"
    async with open_sqlite_store(str(root / "host.db")) as store:
        events = await store.events_after(session.id, 0, limit=100)
    finished = [e.payload for e in events if e.kind == "queue.finished"]
    assert [(f["invocationId"], f["outcome"]) for f in finished] == [
        ("inv-1", "interrupted"),
        ("inv-2", "completed"),
    ]
    settled = [e.payload for e in events if e.kind == "turn.settled"]
    assert settled[0] == {"outcome": "rolled_back", "rows": 0}


async def test_closing_the_host_settles_a_turn_waiting_for_approval(tmp_path: Path) -> None:
    root = tmp_path / "host"
    async with Host.open(root, agents={"helper": agent([Call("note", {"text": "x"})])}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        interaction_id = await until_pending(host, session.id)
    async with Host.open(root, agents={"helper": agent()}) as host:
        interaction = await host.interaction(session.id, interaction_id)
        assert interaction.state == "resolved"
        assert host.queue(session.id).entries == ()
        assert (await host.pending_interactions(session.id)).interactions == ()


def test_receipts_are_json(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Host.open(tmp_path / "h", agents={"helper": agent()}) as host:
            created = await host.create_session("helper", tmp_path, operation="c")
            from emelex.contracts import to_wire

            return dict(to_wire(created))

    wire = trio.run(scenario)
    assert json.loads(json.dumps(wire))["receipt"]["action"] == "createSession"
