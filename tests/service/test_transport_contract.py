"""The Host's operations behave alike in process, over the Unix socket and over TCP.

Each test runs three times (``open_host``, tests/service/conftest.py): errors arrive as
the same classes, receipts and pages as the same values, watches as the same updates.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.contracts import (
    MAX_SEARCH_HITS,
    ApproveResponse,
    ContractError,
    DenyResponse,
    EventAddress,
    InteractionsChanged,
    QueueChanged,
    RowAddress,
    RowsPublished,
    WatchEnded,
    WatchUpdate,
    arguments_text,
)
from emelex.service import (
    AttachmentError,
    ForkRefused,
    InteractionSettled,
    OperationConflict,
    UnknownAgent,
    UnknownInteraction,
    UnknownInvocation,
    UnknownSession,
)
from emelex.testing import Call, Fail, Say
from tests.service.conftest import OpenHost
from tests.service.test_host import NOTES, agent, meta


async def until_idle(host: Any, session_id: str) -> list[WatchUpdate]:
    seen: list[WatchUpdate] = []
    with trio.fail_after(30):
        while True:
            async with host.watch(session_id) as updates:
                async for update in updates:
                    seen.append(update)
                    if isinstance(update, QueueChanged) and not update.queue.entries:
                        return seen
                    if isinstance(update, WatchEnded) and update.reason != "lagged":
                        raise AssertionError(f"the watch ended: {update}")


async def until_pending(host: Any, session_id: str) -> str:
    with trio.fail_after(30):
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, InteractionsChanged) and update.pending:
                    return update.pending[0].id
    raise AssertionError("no interaction arrived")


async def test_sessions_send_history_and_stop(tmp_path: Path, open_host: OpenHost) -> None:
    async with open_host(tmp_path / "root", agents={"helper": agent([Say("hello back")])}) as host:
        created = await host.create_session("helper", tmp_path, operation="c")
        assert await host.create_session("helper", tmp_path, operation="c") == created
        with pytest.raises(OperationConflict):
            await host.create_session("helper", tmp_path, operation="c", title="other")
        with pytest.raises(UnknownAgent):
            await host.create_session("nobody", tmp_path, operation="c2")
        session = created.session
        assert [s.id for s in await host.sessions()] == [session.id]
        sent = await host.send(session.id, "hello", operation="send-1")
        assert await host.send(session.id, "hello", operation="send-1") == sent
        with pytest.raises(OperationConflict):
            await host.send(session.id, "something else", operation="send-1")
        await until_idle(host, session.id)
        bodies: list[str] = []
        with trio.fail_after(30):
            async with host.watch(session.id) as updates:  # catches up from the store
                async for update in updates:
                    if isinstance(update, RowsPublished):
                        bodies.extend(r.body for r in update.rows)
                        if bodies[-1] == "hello back":
                            break
        assert bodies == ["hello", "hello back"]
        page = await host.history(session.id, limit=1)
        assert [r.role for r in page.rows] == ["user"] and page.next_after is not None
        rest = await host.history(session.id, through=page.through, after=page.next_after)
        assert [(r.role, r.body) for r in rest.rows] == [("assistant", "hello back")]
        assert await host.read_row(session.id, rest.rows[0].position) == rest.rows[0]
        stop = await host.stop(session.id, sent.invocation_id, operation="stop-1")
        assert stop.outcome == "alreadyFinished"
        assert await host.stop(session.id, sent.invocation_id, operation="stop-1") == stop
        with pytest.raises(UnknownInvocation):
            await host.stop(session.id, "never-sent", operation="stop-2")
        with pytest.raises(UnknownSession):
            await host.history("s-missing")
        assert (await host.queue(session.id)).entries == ()
        context = await host.context(session.id)
        assert context.session_id == session.id and context.request is not None


async def test_approvals_are_answered_once(tmp_path: Path, open_host: OpenHost) -> None:
    NOTES.clear()
    rounds = agent([Call("note", {"text": "milk"})], [Say("done")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note milk", operation="s1")
        interaction_id = await until_pending(host, session.id)
        (interaction,) = (await host.pending_interactions(session.id)).interactions
        assert interaction.tool_call.arguments == {"text": "milk"}
        assert await host.interaction(session.id, interaction_id) == interaction
        answer = await host.respond(session.id, interaction_id, ApproveResponse(), operation="a1")
        assert answer.interaction.resolution is not None
        assert answer.interaction.resolution.outcome == "approved"
        retried = await host.respond(session.id, interaction_id, ApproveResponse(), operation="a1")
        assert retried == answer
        with pytest.raises(InteractionSettled):
            await host.respond(
                session.id, interaction_id, DenyResponse(reason="no"), operation="a2"
            )
        with pytest.raises(UnknownInteraction):
            await host.interaction(session.id, "i-missing")
        await until_idle(host, session.id)
        assert NOTES == ["milk"]
        rows = (await host.history(session.id)).rows
        assert [r.role for r in rows] == ["user", "assistant", "tool", "assistant"]


async def test_stop_settles_a_waiting_turn(tmp_path: Path, open_host: OpenHost) -> None:
    NOTES.clear()
    rounds = agent([Call("note", {"text": "never"})], [Say("second")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        first = await host.send(session.id, "one", operation="s1")
        second = await host.send(session.id, "two", operation="s2")
        interaction_id = await until_pending(host, session.id)
        queue = await host.queue(session.id)
        assert [e.operation for e in queue.entries] == ["s1", "s2"]
        queued = await host.stop(session.id, second.invocation_id, operation="x2")
        assert queued.outcome == "removedFromQueue"
        running = await host.stop(session.id, first.invocation_id, operation="x1")
        assert running.outcome == "stopping"
        await until_idle(host, session.id)
        interaction = await host.interaction(session.id, interaction_id)
        assert interaction.resolution is not None
        assert interaction.resolution.outcome == "interrupted"
        assert NOTES == []


async def test_search_names_the_original_field(tmp_path: Path, open_host: OpenHost) -> None:
    rounds = agent([Say("The Straße is long; strasse too.")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "Which STRASSE?", operation="s1")
        await until_idle(host, session.id)
        page = await host.search(session.id, "strasse")
        user, answer = (await host.history(session.id)).rows
        assert [(h.position, h.field, h.start, h.end) for h in page.hits] == [
            (user.position, "body", 6, 13),
            (answer.position, "body", 20, 27),
        ]
        exact = await host.search(session.id, "strasse", case_sensitive=True)
        assert [(h.start, h.end) for h in exact.hits] == [(20, 27)]
        assert (await host.search(session.id, "stra", whole_word=True)).hits == ()


async def test_a_row_with_more_hits_than_a_page_is_searched_to_the_end(
    tmp_path: Path, open_host: OpenHost
) -> None:
    """12,000 hits in one answer: two pages, the first cursor inside the row, and the
    scan reaches null (over the wire the cursor goes back as it came)."""
    rounds = agent([Say("a " * 12_000)])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "spaces", operation="s1")
        await until_idle(host, session.id)
        _, answer = (await host.history(session.id)).rows
        pages = []
        after = None
        for _ in range(10):
            page = await host.search(session.id, " ", through=None, after=after)
            pages.append(page)
            after = page.next_after
            if after is None:
                break
        first = pages[0]
        assert len(first.hits) == MAX_SEARCH_HITS
        assert first.next_after is not None and first.next_after.within == MAX_SEARCH_HITS
        assert first.next_after.position == answer.position
        hits = [hit for page in pages for hit in page.hits]
        answer_hits = [hit.start for hit in hits if hit.position == answer.position]
        assert answer_hits == list(range(1, 24_000, 2))
        assert pages[-1].next_after is None


async def test_a_hit_opens_in_history_by_its_target_under_the_same_fence(
    tmp_path: Path, open_host: OpenHost
) -> None:
    rounds = agent([Say("The Straße is long."), Say("Later.")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "Which street?", operation="s1")
        await until_idle(host, session.id)
        page = await host.search(session.id, "straße")
        (hit,) = page.hits
        user, answer = (await host.history(session.id)).rows
        await host.send(session.id, "And then?", operation="s2")
        await until_idle(host, session.id)
        # The fence of the search page, though the session grew since.
        opened = await host.read_history(
            session.id, RowAddress(position=hit.position, field="body"), through=page.through
        )
        assert (opened.through, opened.rows) == (page.through, (answer,))
        event = EventAddress(sequence=user.position.source_sequence)
        assert (await host.read_history(session.id, event, through=page.through)).rows == (user,)
        before = await host.read_history(
            session.id,
            RowAddress(position=answer.position, field="body"),
            through=user.position.source_sequence,
        )
        assert before.rows == ()
        newest = (await host.history(session.id)).through
        far = await host.read_history(session.id, EventAddress(sequence=10**9))
        assert (far.through, far.rows) == (newest, ())
        admitted = user.position.source_sequence - 1  # an event that publishes no row
        assert (await host.read_history(session.id, EventAddress(sequence=admitted))).rows == ()


async def test_a_hit_in_tool_arguments_names_its_call_and_counts_in_the_text_read_returns(
    tmp_path: Path, open_host: OpenHost
) -> None:
    """Offsets count in the canonical argument text (compact JSON, keys as the call gave
    them), which the source read of the hit's target returns: a client never
    re-encodes arguments to highlight a hit."""
    first = {"text": "milk"}
    second = {"text": 'Straße "quoted" ü', "2": [1, {"k": None}]}
    rounds = agent([Call("note", first), Call("note", second)], [Say("done")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "note both", operation="s1")
        # The first call waits for approval (the second breaks the tool's schema): the
        # turn and its rows commit once it is answered.
        asked = await until_pending(host, session.id)
        await host.respond(session.id, asked, DenyResponse(reason="no"), operation="a1")
        await until_idle(host, session.id)
        page = await host.search(session.id, '"straße \\"QUOTED')
        (hit,) = page.hits
        assert (hit.field, hit.call) == ("toolArguments", 1)
        opened = await host.read_history(session.id, hit.target, through=page.through)
        assert opened.text == arguments_text(second)
        assert opened.text.startswith('{"text":"Straße')
        assert opened.text[hit.start : hit.end] == '"Straße \\"quoted'
        assert opened.rows[0].tool_calls[1].arguments == second
        # The compact separators are what search matches: ``":"`` without a space.
        spaced = await host.search(session.id, '"text": "milk"')
        compact = await host.search(session.id, '"text":"milk"')
        assert spaced.hits == ()
        assert [(h.call, h.start, h.end) for h in compact.hits] == [(0, 1, 14)]
        body = await host.read_history(
            session.id, RowAddress(position=hit.position, field="body"), through=page.through
        )
        assert body.text == body.rows[0].body
        missing = RowAddress(position=hit.position, field="toolArguments", call=7)
        absent = await host.read_history(session.id, missing, through=page.through)
        assert (absent.rows != (), absent.text) == (True, None)
        with pytest.raises(ContractError, match="names its call"):
            RowAddress(position=hit.position, field="toolArguments")


async def test_fork_and_its_receipt(tmp_path: Path, open_host: OpenHost) -> None:
    rounds = agent([Say("first answer")], [Say("fork answer")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        source = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(source.id, "one", operation="s1")
        await until_idle(host, source.id)
        revision = (await host.history(source.id)).through
        fork = await host.fork(source.id, revision=revision, operation="f1", tools=[])
        assert await host.fork(source.id, revision=revision, operation="f1", tools=[]) == fork
        assert await host.fork_receipt(source.id, operation="f1") == fork
        assert await host.fork_receipt(source.id, operation="never") is None
        copied = (await host.history(fork.session.id)).rows
        assert [r.body for r in copied] == ["one", "first answer"]
        with pytest.raises(ForkRefused, match="cannot enable"):
            await host.fork(
                fork.session.id, revision=fork.session.revision, operation="f2", tools=["note"]
            )
        with pytest.raises(ForkRefused, match="not a revision"):
            await host.fork(source.id, revision=revision + 100, operation="f3")


async def test_diagnostics_and_their_watch(tmp_path: Path, open_host: OpenHost) -> None:
    secret = "provider body: api key sk-123 leaked"
    rounds = agent([Fail(RuntimeError(secret))], [Say("fine")])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        with trio.fail_after(30):
            async with host.watch_diagnostics(session.id) as revisions:
                assert (await revisions.__anext__()).revision == 0
                failed = await host.send(session.id, "one", operation="s1")
                assert (await revisions.__anext__()).revision == 1
        page = await host.diagnostics(session.id)
        (only,) = page.diagnostics
        assert (only.kind, only.invocation_id) == ("modelStep", failed.invocation_id)
        assert "sk-123" not in only.cause.message
        assert page.through == 1 and page.next_before is None


async def test_a_lagging_watcher_resumes_without_gap(tmp_path: Path, open_host: OpenHost) -> None:
    rounds = agent(*[[Say(f"answer {n}")] for n in range(4)])
    async with open_host(tmp_path / "root", agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        for n in range(4):
            await host.send(session.id, f"q{n}", operation=f"s{n}")
        await until_idle(host, session.id)
        first = await host.history(session.id, limit=3)
        bodies = [r.body for r in first.rows]
        with trio.fail_after(30):
            async with host.watch(session.id, after=first.next_after) as updates:
                async for update in updates:
                    if isinstance(update, RowsPublished):
                        bodies.extend(r.body for r in update.rows)
                        if bodies[-1] == "answer 3":
                            break
        assert bodies == [text for n in range(4) for text in (f"q{n}", f"answer {n}")]


async def test_execute_streams_its_attachments(tmp_path: Path, open_host: OpenHost) -> None:
    notes, empty, image = b"milk\neggs\n", b"", bytes(range(256)) * 400
    metas = [meta("notes.txt", notes), meta("empty.txt", empty), meta("a.png", image, "image/png")]

    async def chunked() -> AsyncIterator[bytes]:
        data = notes + empty + image
        for start in range(0, len(data), 7000):
            yield data[start : start + 7000]

    async with open_host(tmp_path / "root", agents={"helper": agent([Say("Two items.")])}) as host:
        receipt = await host.execute(
            "helper", "How many items?", operation="x1", attachments=metas, resource=chunked()
        )
        again = await host.execute(
            "helper", "How many items?", operation="x1", attachments=metas, resource=notes
        )
        assert again == receipt  # a retry reads no resource and admits nothing
        await until_idle(host, receipt.session_id)
        result = await host.execute_result(receipt.session_id, receipt.invocation_id)
        assert result is not None
        assert (result.status, result.answer) == ("completed", "Two items.")
        (info,) = [s for s in await host.sessions() if s.id == receipt.session_id]
        workspace = Path(info.workspace)
        assert (workspace / "a.png").read_bytes() == image
        assert (workspace / "notes.txt").read_bytes() == notes
        with pytest.raises(AttachmentError, match="does not match its digest"):
            await host.execute(
                "helper",
                "go",
                operation="x2",
                attachments=[meta("notes.txt", notes)],
                resource=b"milk\neggX\n",
            )
        with pytest.raises(AttachmentError, match="no resource"):
            await host.execute(
                "helper", "go", operation="x3", attachments=[meta("notes.txt", notes)]
            )


@pytest.mark.parametrize("streamed", [False, True], ids=["bytes", "streamed"])
async def test_a_resource_longer_than_its_metadata_is_refused_as_itself(
    tmp_path: Path, open_host: OpenHost, streamed: bool
) -> None:
    """The Host refuses the extra bytes while the client is still sending them: the client
    gets the typed error (not a transport failure once its send stalls), and the same
    client goes on working."""
    notes = b"milk\neggs\n"
    extra = b"x" * (20 * 1024 * 1024)

    async def chunks() -> AsyncIterator[bytes]:
        data = notes + extra
        for start in range(0, len(data), 1 << 20):
            yield data[start : start + (1 << 20)]

    async with open_host(tmp_path / "root", agents={"helper": agent([Say("Done.")])}) as host:
        with trio.fail_after(60), pytest.raises(AttachmentError, match="more than"):
            await host.execute(
                "helper",
                "go",
                operation="long",
                attachments=[meta("notes.txt", notes)],
                resource=chunks() if streamed else notes + extra,
            )
        receipt = await host.execute(
            "helper", "go", operation="fine", attachments=[meta("notes.txt", notes)], resource=notes
        )
        await until_idle(host, receipt.session_id)
        result = await host.execute_result(receipt.session_id, receipt.invocation_id)
        assert result is not None and result.status == "completed"
