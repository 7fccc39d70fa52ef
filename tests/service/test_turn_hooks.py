"""The seam between a turn and its session: a one-tool turn's writes are batched into
three store transactions, and nothing a context report or recovery needs is lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from emelex.app import Agent
from emelex.service import Host
from emelex.store import StoredEvent
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool


@tool
async def note(text: str) -> str:
    """Note something.

    Args:
        text: What to note.
    """
    return f"noted {text}"


def one_tool_agent() -> Agent:
    model = ScriptedModel([[Call("note", {"text": "x"})], [Say("done")]])
    builder = Agent.builder().name("helper").instructions("Note.").model(model)
    return builder.tool(note).build()


async def events_of(host: Host, session_id: str) -> list[StoredEvent]:
    return list(await host._store.events_after(session_id, 0, limit=1000))


async def test_a_one_tool_turn_takes_three_store_transactions(tmp_path: Path) -> None:
    """Its start, the progress before the tool and its end: the progress after the
    batch rides with the end, as the request records do."""
    async with Host.open(tmp_path / "host", agents={"helper": one_tool_agent()}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        store: Any = host._store
        appends: list[list[str]] = []
        plain = store.append_events

        async def counted(session_id: str, events: Any, **options: Any) -> Any:
            appends.append([e.kind for e in events])
            return await plain(session_id, events, **options)

        store.append_events = counted
        sent = await host.send(session.id, "go", operation="s")
        async with host.watch(session.id) as updates:
            async for _ in updates:
                if sent.invocation_id in host._registry.get(session.id).finished:
                    break
        admitted, *turn = appends
        assert admitted == ["queue.admitted"]
        assert len(turn) == 3, turn
        started, journal, end = turn
        assert started == ["queue.started"]
        # The first round's records ride with the journal, written before the tool ran.
        assert journal == ["request.prepared", "request.settled", "turn.journal"]
        assert end[:3] == ["turn.journal", "request.prepared", "request.settled"]
        assert end[-1] == "queue.finished"
        # Both requests are on record, settled, as the context report shows them.
        report = await host.context(session.id)
        assert report.request is not None and report.request.state == "completed"
        kinds = [e.kind for e in await events_of(host, session.id)]
        assert kinds.count("request.prepared") == kinds.count("request.settled") == 2
