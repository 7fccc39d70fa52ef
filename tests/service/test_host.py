"""The in-process Host: sessions, receipts, the work queue, interactions, watch, restart."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import DenyAll
from emelex.agent._turn_rules import INTERRUPTED
from emelex.app import Agent, RestartMode
from emelex.contracts import (
    AgentName,
    AgentWorker,
    ApproveResponse,
    AttachmentMeta,
    DenyResponse,
    ForkWorker,
    InteractionsChanged,
    QueueChanged,
    RowsPublished,
    WatchEnded,
    WatchUpdate,
)
from emelex.model import Message, ToolCall, to_json
from emelex.service import (
    AttachmentError,
    ForkRefused,
    Host,
    InteractionSettled,
    OperationConflict,
    QueueFull,
    UnknownAgent,
    UnknownInvocation,
    UnknownSession,
)
from emelex.store import NewEvent, open_sqlite_store
from emelex.testing import Call, Fail, Say, ScriptedModel, Wait
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


def agent(*rounds: list[Any], on_restart: RestartMode = "resume") -> Agent:
    model = ScriptedModel([list(r) for r in rounds])
    # The Host answers approvals through interactions, whatever approver the agent names.
    builder = Agent.builder().name("helper").instructions("Help.").model(model).tool(note)
    return builder.approver(DenyAll()).on_restart(on_restart).build()


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
        assert [s.id for s in (await host.sessions())] == [first.session.id]


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
        assert (await host.queue(session.id)).entries == ()


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
        assert [e.operation for e in (await host.queue(session.id)).entries] == ["s1", "s2"]


async def test_search_pages_name_the_original_field(tmp_path: Path) -> None:
    rounds = agent([Say("The Straße is long; strasse too.")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "Which STRASSE?", operation="s1")
        await until_idle(host, session.id)
        page = await host.search(session.id, "strasse")
        user, answer = (await host.history(session.id)).rows
        assert [(h.position, h.field, h.start, h.end) for h in page.hits] == [
            (user.position, "body", 6, 13),  # simple folding leaves "ß" alone
            (answer.position, "body", 20, 27),
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
    # Under "settle" (under "resume": tests/service/test_resumed_turns.py).
    rounds = agent([Say("after restart")], on_restart="settle")
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
    settling = agent([Call("note", {"text": "x"})], on_restart="settle")
    async with Host.open(root, agents={"helper": settling}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        interaction_id = await until_pending(host, session.id)
    async with Host.open(root, agents={"helper": agent(on_restart="settle")}) as host:
        interaction = await host.interaction(session.id, interaction_id)
        assert interaction.state == "resolved"
        assert (await host.queue(session.id)).entries == ()
        assert (await host.pending_interactions(session.id)).interactions == ()


def test_receipts_are_json(tmp_path: Path) -> None:
    async def scenario() -> dict[str, Any]:
        async with Host.open(tmp_path / "h", agents={"helper": agent()}) as host:
            created = await host.create_session("helper", tmp_path, operation="c")
            from emelex.contracts import to_wire

            return dict(to_wire(created))

    wire = trio.run(scenario)
    assert json.loads(json.dumps(wire))["receipt"]["action"] == "createSession"


async def test_restart_checkpoints_a_turn_whose_tool_may_have_run(tmp_path: Path) -> None:
    root = tmp_path / "host"
    async with Host.open(root, agents={"helper": agent()}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
    checkpoint = [
        Message.user("note it"),
        Message.assistant("", tool_calls=(ToolCall("c1", "note", {"text": "x"}),)),
        Message("tool", "interrupted", tool_call_id="c1"),
    ]
    async with open_sqlite_store(str(root / "host.db")) as store:
        admitted = {"invocationId": "inv-1", "operation": "s1", "text": "note it"}
        await store.append_events(
            session.id,
            [
                NewEvent("queue.admitted", None, admitted),
                NewEvent("queue.started", None, {"invocationId": "inv-1"}),
                NewEvent(
                    "turn.journal",
                    "turn-1",
                    {
                        "invocationId": "inv-1",
                        "messages": [json.loads(to_json(m)) for m in checkpoint],
                    },
                ),
            ],
        )
    async with Host.open(root, agents={"helper": agent(on_restart="settle")}) as host:
        rows = (await host.history(session.id)).rows
        assert [(r.role, r.turn_id) for r in rows] == [
            ("user", "turn-1"),
            ("assistant", "turn-1"),
            ("tool", "turn-1"),
        ]
        assert rows[2].tool_name == "note"
    async with open_sqlite_store(str(root / "host.db")) as store:
        events = await store.events_after(session.id, 0, limit=100)
    settled = [e.payload for e in events if e.kind == "turn.settled"]
    assert settled == [{"outcome": "checkpointed", "rows": 3}]


async def test_each_tool_call_is_journalled_before_it_runs(tmp_path: Path) -> None:
    NOTES.clear()
    rounds = agent([Call("note", {"text": "milk"})], [Say("done")])
    root = tmp_path / "host"
    async with Host.open(root, agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note milk", operation="s1")
        interaction_id = await until_pending(host, session.id)
        await host.respond(session.id, interaction_id, ApproveResponse(), operation="a1")
        await until_idle(host, session.id)
    async with open_sqlite_store(str(root / "host.db")) as store:
        events = await store.events_after(session.id, 0, limit=100)
    kinds = [e.kind for e in events]
    # Progress is written before the approval is asked, after it is answered (before
    # the tool may run) and after the batch.
    assert [
        k for k in kinds if k in ("turn.journal", "interaction.requested", "interaction.resolved")
    ] == [
        "turn.journal",
        "interaction.requested",
        "interaction.resolved",
        "turn.journal",
        "turn.journal",
    ]
    before, starting, after = [e.payload for e in events if e.kind == "turn.journal"]
    assert [m["data"]["role"] for m in starting["messages"]] == ["user", "assistant", "tool"]
    assert before["openCalls"] and not before["mayHaveRun"]
    assert not starting["openCalls"] and starting["mayHaveRun"]
    assert INTERRUPTED in json.dumps(starting["messages"])
    assert INTERRUPTED not in json.dumps(after["messages"])
    assert NOTES == ["milk"]


async def test_fork_keeps_history_through_a_turn_and_never_widens(tmp_path: Path) -> None:
    NOTES.clear()
    rounds = agent([Say("first answer")], [Say("second answer")], [Say("fork answer")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        source = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(source.id, "one", operation="s1")
        await until_idle(host, source.id)
        first_turn = (await host.history(source.id)).rows[-1].turn_id
        await host.send(source.id, "two", operation="s2")
        await until_idle(host, source.id)
        revision = (await host.history(source.id)).through
        fork = await host.fork(
            source.id, revision=revision, turn_id=first_turn, operation="f1", tools=[]
        )
        assert (
            await host.fork(
                source.id, revision=revision, turn_id=first_turn, operation="f1", tools=[]
            )
            == fork
        )
        assert await host.fork_receipt(source.id, operation="f1") == fork
        assert await host.fork_receipt(source.id, operation="never") is None
        assert fork.branch.source_session_id == source.id
        assert fork.branch.source_turn_id == first_turn
        assert fork.session.branch == fork.branch
        copied = (await host.history(fork.session.id)).rows
        assert [(r.role, r.body) for r in copied] == [
            ("user", "one"),
            ("assistant", "first answer"),
        ]
        assert (await host.queue(fork.session.id)).entries == ()
        with pytest.raises(ForkRefused, match="cannot enable"):
            await host.fork(
                fork.session.id,
                revision=fork.session.revision,
                operation="f2",
                tools=["note"],
            )
        with pytest.raises(ForkRefused, match="not a revision"):
            await host.fork(source.id, revision=revision + 100, operation="f3")
        with pytest.raises(ForkRefused, match="not a settled turn"):
            await host.fork(source.id, revision=2, turn_id=first_turn, operation="f4")
        with pytest.raises(OperationConflict):
            await host.fork(source.id, revision=revision, operation="f1")
        # The fork works on its own: new turns land after the copied history.
        await host.send(fork.session.id, "three", operation="s3")
        await until_idle(host, fork.session.id)
        rows = (await host.history(fork.session.id)).rows
        assert [r.body for r in rows][-2:] == ["three", "fork answer"]
        assert len((await host.history(source.id)).rows) == 4
    # Forks survive a restart with their branch and narrowed tools.
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        (info,) = [s for s in (await host.sessions()) if s.id == fork.session.id]
        assert info.branch == fork.branch


async def test_failures_are_diagnostics_with_their_own_revision(tmp_path: Path) -> None:
    secret = "provider body: api key sk-123 leaked"
    rounds = agent([Fail(RuntimeError(secret))], [Say("fine")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        async with host.watch_diagnostics(session.id) as revisions:
            first = await revisions.__anext__()
            assert first.revision == 0
            failed = await host.send(session.id, "one", operation="s1")
            await until_idle(host, session.id)
            assert (await revisions.__anext__()).revision == 1
        page = await host.diagnostics(session.id)
        (only,) = page.diagnostics
        assert (only.kind, only.cause.code, only.invocation_id) == (
            "modelStep",
            "modelError",
            failed.invocation_id,
        )
        assert secret not in only.cause.message and "sk-123" not in only.cause.message
        assert page.through == 1 and page.next_before is None
        # Diagnostics keep their revision while history moves on.
        await host.send(session.id, "two", operation="s2")
        await until_idle(host, session.id)
        assert (await host.diagnostics(session.id)).through == 1
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        assert (await host.diagnostics(session.id)).diagnostics == page.diagnostics


async def test_diagnostic_pages_are_newest_first_under_a_fence(tmp_path: Path) -> None:
    rounds = agent(*[[Fail(RuntimeError("x"))] for _ in range(5)])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        for n in range(5):
            await host.send(session.id, f"q{n}", operation=f"s{n}")
        await until_idle(host, session.id)
        first = await host.diagnostics(session.id, limit=2)
        assert [d.revision for d in first.diagnostics] == [5, 4] and first.next_before == 4
        rest = await host.diagnostics(
            session.id, through=first.through, before=first.next_before, limit=10
        )
        assert [d.revision for d in rest.diagnostics] == [3, 2, 1] and rest.next_before is None


async def test_automatic_titles_and_title_failures(tmp_path: Path) -> None:
    rounds = agent([Say("hello")], [Say('"Milk notes"')])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}, titles=True) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note milk", operation="s1")
        await until_idle(host, session.id)
        with trio.fail_after(10):
            while (await host.sessions())[0].title is None:  # noqa: ASYNC110 (no event)
                await trio.sleep(0.01)  # the title call follows the turn's commit
        assert (await host.sessions())[0].title == "Milk notes"
    failing = agent([Say("hello")], [Fail(RuntimeError("no"))])
    async with Host.open(tmp_path / "other", agents={"helper": failing}, titles=True) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note milk", operation="s1")
        async with host.watch_diagnostics(session.id) as revisions:
            async for revision in revisions:
                if revision.revision == 1:
                    break
        (title_failure,) = (await host.diagnostics(session.id)).diagnostics
        assert title_failure.kind == "title"
        rows = (await host.history(session.id)).rows
        assert [r.body for r in rows] == ["note milk", "hello"]  # the turn itself stands


async def test_a_title_or_its_failure_never_moves_the_history_fence(tmp_path: Path) -> None:
    for name, title_round in (("failed", [Fail(RuntimeError("no"))]), ("titled", [Say("Milk")])):
        rounds = agent([Say("hello")], title_round)
        async with Host.open(tmp_path / name, agents={"helper": rounds}, titles=True) as host:
            session = (await host.create_session("helper", tmp_path, operation="c")).session
            await host.send(session.id, "note milk", operation="s1")
            await until_idle(host, session.id)
            before = await host.history(session.id)
            with trio.fail_after(10):
                while (  # noqa: ASYNC110 (the title call follows the turn's commit)
                    (await host.sessions())[0].title is None
                    and (await host.diagnostics(session.id)).through == 0
                ):
                    await trio.sleep(0.01)
            after = await host.history(session.id)
            assert after.through == before.through and after.rows == before.rows
            fixed = await host.history(session.id, through=before.through + 1)
            assert fixed.through == before.through  # a fence on the title's event clamps
            assert (await host.search(session.id, "milk")).through == before.through


def meta(name: str, data: bytes, mime_type: str = "text/plain") -> AttachmentMeta:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    return AttachmentMeta(name=name, mime_type=mime_type, bytes=len(data), digest=digest)  # type: ignore[arg-type]


async def test_execute_runs_a_task_on_its_attachments(tmp_path: Path) -> None:
    notes, empty, image = b"milk\neggs\n", b"", bytes(range(256)) * 40
    metas = [meta("notes.txt", notes), meta("empty.txt", empty), meta("a.png", image, "image/png")]

    async def chunked() -> AsyncIterator[bytes]:
        data = notes + empty + image
        for start in range(0, len(data), 1000):  # any chunking: offsets follow from sizes
            yield data[start : start + 1000]

    rounds = agent([Say("Two items.")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        receipt = await host.execute(
            "helper", "How many items?", operation="x1", attachments=metas, resource=chunked()
        )
        again = await host.execute("helper", "How many items?", operation="x1", attachments=metas)
        assert again == receipt  # a retry reads no resource and admits nothing
        await until_idle(host, receipt.session_id)
        result = await host.execute_result(receipt.session_id, receipt.invocation_id)
        assert result is not None and (result.status, result.answer) == ("completed", "Two items.")
        workspace = Path((await host.sessions())[-1].workspace)
        assert (workspace / "notes.txt").read_bytes() == notes
        assert (workspace / "a.png").read_bytes() == image
        assert (workspace / "empty.txt").read_bytes() == b""
        assert oct((workspace / "notes.txt").stat().st_mode & 0o777) == "0o444"
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        assert await host.execute_result(receipt.session_id, receipt.invocation_id) == result


@pytest.mark.parametrize(
    ("resource", "match"),
    [
        (b"milk\neggX\n", "does not match its digest"),
        (b"milk\n", "ended after 5 of the 10 bytes"),
        (b"milk\neggs\nmore", "more than the 10 bytes"),
        (None, "no resource"),
    ],
)
async def test_execute_refuses_a_resource_that_does_not_match(
    tmp_path: Path, resource: bytes | None, match: str
) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        with pytest.raises(AttachmentError, match=match):
            await host.execute(
                "helper",
                "go",
                operation="x1",
                attachments=[meta("notes.txt", b"milk\neggs\n")],
                resource=resource,
            )
        assert (await host.sessions()) == ()
        assert list((tmp_path / "host" / "executor").iterdir()) == []


async def test_execute_bounds_the_attachment_bytes(tmp_path: Path) -> None:
    big = meta("big.bin", b"x" * 2048)
    async with Host.open(
        tmp_path / "host", agents={"helper": agent()}, max_attachment_bytes=1024
    ) as host:
        with pytest.raises(AttachmentError, match="the Host takes 1024"):
            await host.execute("helper", "go", operation="x1", attachments=[big], resource=None)
        with pytest.raises(AttachmentError, match="share a name"):
            await host.execute(
                "helper",
                "go",
                operation="x2",
                attachments=[meta("a", b""), meta("a", b"")],
                resource=b"",
            )


async def test_a_coordinator_starts_workers_and_collects_results(tmp_path: Path) -> None:
    coordinator_rounds = agent([Say("plan ready")], [Say("forked work done")])
    worker_rounds = ScriptedModel([[Say("agent work done")]])
    other = Agent.builder().name("other").instructions("Work.").model(worker_rounds).build()
    agents = {"helper": coordinator_rounds, "other": other}
    async with Host.open(tmp_path / "host", agents=agents) as host:
        hub = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(hub.id, "make a plan", operation="s1")
        await until_idle(host, hub.id)
        forked = await host.start_worker(
            hub.id, ForkWorker(turn_id=None), "do part 1", operation="w1"
        )
        assert (
            await host.start_worker(hub.id, ForkWorker(turn_id=None), "do part 1", operation="w1")
            == forked
        )
        fresh = await host.start_worker(
            hub.id, AgentWorker(agent=AgentName("other")), "do part 2", operation="w2", tools=[]
        )
        with pytest.raises(ForkRefused, match="cannot enable"):
            await host.start_worker(
                hub.id, AgentWorker(agent=AgentName("other")), "x", operation="w3", tools=["rm_rf"]
            )
        for worker in (forked.worker_id, fresh.worker_id):
            await until_idle(host, worker)
        snapshot = await host.workers(hub.id)
        assert [(w.worker_id, w.state, w.result) for w in snapshot.workers] == [
            (forked.worker_id, "completed", "forked work done"),
            (fresh.worker_id, "completed", "agent work done"),
        ]
        # The forked worker kept the coordinator's history; both share its workspace.
        rows = (await host.history(forked.worker_id)).rows
        assert [r.body for r in rows][:2] == ["make a plan", "plan ready"]
        infos = {s.id: s for s in (await host.sessions())}
        assert infos[fresh.worker_id].workspace == infos[hub.id].workspace
    async with Host.open(tmp_path / "host", agents=agents) as host:
        again = await host.workers(hub.id)
        assert [w.worker_id for w in again.workers] == [forked.worker_id, fresh.worker_id]


async def test_context_reports_the_latest_main_request(tmp_path: Path) -> None:
    rounds = agent([Call("note", {"text": "x"})], [Say("done")])
    async with Host.open(tmp_path / "host", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        assert (await host.context(session.id)).request is None
        sent = await host.send(session.id, "note it", operation="s1")
        interaction_id = await until_pending(host, session.id)
        first = (await host.context(session.id)).request
        assert first is not None and first.state == "completed"  # the round that asked
        assert first.invocation_id == sent.invocation_id and first.turn_id
        assert {g.role for g in first.groups} >= {"system", "user"}
        assert [t.name for t in first.tools] == ["note"]
        assert first.estimated_tokens  # ours, beside what the provider reported:
        assert first.provider_input_tokens is not None
        await host.respond(session.id, interaction_id, ApproveResponse(), operation="a1")
        await until_idle(host, session.id)
        report = await host.context(session.id)
        assert report.request is not None and report.request.turn_id == first.turn_id
        assert report.request.prepared_sequence > first.prepared_sequence
        roles = {g.role: g.messages for g in report.request.groups}
        assert roles["tool"] == 1 and roles["assistant"] == 1
        pinned = await host.context(session.id, through=first.prepared_sequence)
        assert pinned.request is not None and pinned.request.state == "running"
    async with Host.open(tmp_path / "host", agents={"helper": agent()}) as host:
        assert (await host.context(session.id)).request == report.request


async def test_a_slow_title_never_holds_the_next_turn_back(tmp_path: Path) -> None:
    # The title call takes the second round and waits a minute; the second turn's round
    # comes right after it, and must not wait for it.
    slow = agent([Say("first")], [Wait(60), Say("Never")], [Say("second")])
    async with Host.open(tmp_path / "host", agents={"helper": slow}, titles=True) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "one", operation="s1")
        await until_idle(host, session.id)
        second = await host.send(session.id, "two", operation="s2")
        with trio.fail_after(20):
            await until_idle(host, session.id)
        result = await host.execute_result(session.id, second.invocation_id)
        assert result is not None and result.status == "completed"
        assert (await host.sessions())[0].title is None  # still asking; dropped at close


async def test_one_operation_reference_namespace_per_session(tmp_path: Path) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": agent([Say("a")])}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "one", operation="x")
        await until_idle(host, session.id)
        revision = (await host.history(session.id)).through
        with pytest.raises(OperationConflict):  # a send's reference is no fork's
            await host.fork(session.id, revision=revision, operation="x")
        forked = await host.fork(session.id, revision=revision, operation="y")
        assert await host.fork(session.id, revision=revision, operation="y") == forked
        with pytest.raises(OperationConflict):  # nor a fork's a send's
            await host.send(session.id, "two", operation="y")
