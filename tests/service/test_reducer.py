"""The reducer on its own: total over any event sequence, deterministic, and the one
decider of outcomes (a stop of queued work answers the same before and after a restart)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.contracts import InteractionsChanged
from emelex.service import Host
from emelex.service._reducer import SessionLog, apply
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import tool

CONFIG = {"agent": "helper", "workspace": "/w", "title": None}


def new_log() -> SessionLog:
    return SessionLog.from_config("s-1", CONFIG, created_at=0.0, capacity=4)


def interaction(ident: str, invocation: str, state: str = "pending") -> dict[str, Any]:
    resolution = None
    if state == "resolved":
        resolution = {"outcome": "approved", "by": "client", "reason": None, "sequence": 1}
    return {
        "id": ident,
        "sessionId": "s-1",
        "invocationId": invocation,
        "turnId": "t",
        "toolCall": {"id": "c", "name": "mark", "arguments": {}},
        "reason": "why",
        "state": state,
        "requestedSequence": 1,
        "resolution": resolution,
    }


def event(kind: str, invocation: str, extra: int) -> tuple[str, str | None, dict[str, Any]]:
    """One event of any kind the service writes, about ``invocation``."""
    payloads: dict[str, dict[str, Any]] = {
        "queue.admitted": {"invocationId": invocation, "operation": f"o{extra}", "text": "x"},
        "queue.started": {"invocationId": invocation},
        "queue.stop": {"invocationId": invocation},
        "queue.finished": {
            "invocationId": invocation,
            "outcome": ["completed", "stopped"][extra % 2],
        },
        "interaction.requested": interaction(f"i{extra}", invocation),
        "interaction.resolved": interaction(f"i{extra}", invocation, "resolved"),
        "turn.journal": {"invocationId": invocation, "messages": []},
        "request.prepared": {"invocationId": invocation, "turnId": "t"},
        "request.settled": {
            "preparedSequence": extra,
            "state": "completed",
            "providerInputTokens": 3,
        },
        "workhub.worker": {"workerId": "w", "invocationId": invocation, "operation": "o"},
        "session.titled": {"title": f"title {extra}"},
        "turn.settled": {"outcome": "committed"},
    }
    return kind, "t", payloads[kind]


events = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "queue.admitted",
                "queue.started",
                "queue.stop",
                "queue.finished",
                "interaction.requested",
                "interaction.resolved",
                "turn.journal",
                "request.prepared",
                "request.settled",
                "workhub.worker",
                "session.titled",
                "turn.settled",
            ]
        ),
        st.sampled_from(["a", "b", "c"]),
        st.integers(min_value=0, max_value=5),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(events)
def test_any_event_sequence_gives_a_state_and_the_same_one_twice(
    drawn: list[tuple[str, str, int]],
) -> None:
    first, second = new_log(), new_log()
    for sequence, (kind, invocation, extra) in enumerate(drawn, start=1):
        apply(first, sequence, *event(kind, invocation, extra))
    for sequence, (kind, invocation, extra) in enumerate(drawn, start=1):
        apply(second, sequence, *event(kind, invocation, extra))
        # Applying an event twice (a follower that read it again) changes nothing.
        apply(second, sequence, *event(kind, invocation, extra))
    assert first.snapshot() == second.snapshot()
    # At most one invocation runs, and it is one the queue holds.
    assert sum(1 for e in first.queue.entries if e.state == "running") <= 1
    assert not (first.finished & {e.work.invocation_id for e in first.queue.entries})
    assert set(first.interrupted()) <= set(first.started)


def test_a_finished_invocation_keeps_its_first_outcome_and_leaves_the_queue() -> None:
    log = new_log()
    apply(log, 1, *event("queue.admitted", "a", 0))
    apply(log, 2, *event("queue.started", "a", 0))
    apply(log, 3, *event("queue.stop", "a", 0))
    assert log.stopping == {"a"}
    apply(log, 4, "queue.finished", None, {"invocationId": "a", "outcome": "stopped"})
    apply(log, 5, "queue.finished", None, {"invocationId": "a", "outcome": "completed"})
    assert log.outcomes == {"a": "stopped"}
    assert not log.queue.entries and not log.stopping and log.revision == 5


@tool(needs_approval=True)
async def mark(text: str) -> str:
    """Mark something.

    Args:
        text: What to mark.
    """
    return f"marked {text}"


def waiting_agent() -> Agent:
    model = ScriptedModel([[Call("mark", {"text": "x"})], [Say("done")], [Say("second")]])
    return (
        Agent.builder()
        .name("helper")
        .instructions("Mark.")
        .model(model)
        .tool(mark)
        .approver(DenyAll())
        .build()
    )


async def test_a_stopped_queued_invocation_answers_stopped_before_and_after_restart(
    tmp_path: Path,
) -> None:
    root = tmp_path / "host"
    agents = {"helper": waiting_agent()}
    async with Host.open(root, agents=agents) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        first = await host.send(session.id, "one", operation="s1")
        second = await host.send(session.id, "two", operation="s2")
        with trio.fail_after(30):
            async with host.watch(session.id) as updates:
                async for update in updates:
                    if isinstance(update, InteractionsChanged) and update.pending:
                        break
        stop = await host.stop(session.id, second.invocation_id, operation="stop")
        assert stop.outcome == "removedFromQueue"
        live = await host.execute_result(session.id, second.invocation_id)
        assert live is not None and live.status == "stopped"
        assert await host.execute_result(session.id, first.invocation_id) is None
    async with Host.open(root, agents=agents) as host:
        again = await host.execute_result(session.id, second.invocation_id)
        assert again == live
        # The one that waited for its approval was settled when the Host closed.
        interrupted = await host.execute_result(session.id, first.invocation_id)
        assert interrupted is not None and interrupted.status == "failed"
