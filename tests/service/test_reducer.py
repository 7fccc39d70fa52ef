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
from emelex.contracts import (
    MAX_SETTLED_INVOCATIONS,
    MAX_SETTLED_TEXT_CHARS,
    InteractionsChanged,
    QueueSnapshot,
    from_wire,
    to_wire,
)
from emelex.service import Host
from emelex.service._reducer import MAX_TURNS_COUNTED, SessionLog, Settled, apply
from emelex.service._session import HostSession
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
        "queue.stop": {"invocationId": invocation, "operation": f"stop{extra}"},
        "queue.finished": {
            "invocationId": invocation,
            "outcome": ["completed", "stopped", "failed"][extra % 3],
            "finishedAtMs": extra,
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
        "turn.input": {},
    }
    return kind, f"t{extra % 2}", payloads[kind]


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
                "turn.input",
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
    # What finished with nothing committed is finished, and bounded.
    assert {s.invocation_id for s in first.settled} <= first.finished
    assert len(first.settled) <= MAX_SETTLED_INVOCATIONS


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
        # The one that waited for its approval was resumed: it still waits.
        assert await host.execute_result(session.id, first.invocation_id) is None
        (pending,) = (await host.pending_interactions(session.id)).interactions
        assert pending.invocation_id == first.invocation_id


def _admit(log: SessionLog, sequence: int, invocation: str, text: str = "x") -> None:
    payload = {"invocationId": invocation, "operation": f"op-{invocation}", "text": text}
    apply(log, sequence, "queue.admitted", None, payload)


def test_a_stop_of_queued_work_is_kept_with_its_prompt_place_time_and_stop() -> None:
    log = new_log()
    _admit(log, 1, "a", "first")
    _admit(log, 2, "b", "second")
    apply(log, 3, "queue.started", None, {"invocationId": "a"})
    stopped = {
        "invocationId": "b",
        "outcome": "stopped",
        "stopOperation": "stop-b",
        "finishedAtMs": 1_700_000_000_000,
    }
    apply(log, 4, "queue.finished", None, stopped)
    assert log.settled == [
        Settled(
            invocation_id="b",
            operation="op-b",
            work="send",
            text="second",
            clipped=False,
            outcome="stopped",
            started=False,
            finished_sequence=4,
            stop_operation="stop-b",
            finished_at_ms=1_700_000_000_000,
        )
    ]
    assert [e.work.invocation_id for e in log.queue.entries] == ["a"]


def test_a_running_stop_that_committed_nothing_is_kept_and_names_its_stop() -> None:
    log = new_log()
    _admit(log, 1, "a", "long task")
    apply(log, 2, "queue.started", None, {"invocationId": "a"})
    apply(log, 3, "queue.stop", None, {"invocationId": "a", "operation": "stop-1"})
    apply(log, 4, "queue.stop", None, {"invocationId": "a", "operation": "stop-2"})
    assert log.stop_operations == {"a": "stop-1"}  # the first stop asked for it
    # The harness rolled the turn back: its settling event publishes no row.
    apply(log, 5, "turn.settled", "t-1", {"outcome": "rolled_back", "rows": 0})
    apply(log, 6, "queue.finished", "t-1", {"invocationId": "a", "outcome": "stopped"})
    (settled,) = log.settled
    assert (settled.text, settled.outcome, settled.started) == ("long task", "stopped", True)
    assert (settled.stop_operation, settled.finished_sequence) == ("stop-1", 6)
    assert settled.finished_at_ms is None  # a log written before Hosts recorded it
    assert log.stop_operations == {} and log.turn_rows == {}


def test_failed_and_interrupted_runs_that_committed_nothing_are_kept() -> None:
    log = new_log()
    _admit(log, 1, "a")
    apply(log, 2, "queue.started", None, {"invocationId": "a"})
    apply(log, 3, "queue.finished", "t-1", {"invocationId": "a", "outcome": "failed"})
    _admit(log, 4, "b")
    apply(log, 5, "queue.started", None, {"invocationId": "b"})
    apply(log, 6, "queue.finished", "t-2", {"invocationId": "b", "outcome": "interrupted"})
    assert [(s.invocation_id, s.outcome, s.stop_operation) for s in log.settled] == [
        ("a", "failed", None),
        ("b", "interrupted", None),
    ]
    # Whatever a log holds gives a state: odd outcomes and times are not kept as such.
    _admit(log, 7, "c")
    odd = {"invocationId": "c", "outcome": ["stopped"], "finishedAtMs": -1}
    apply(log, 8, "queue.finished", None, odd)
    _admit(log, 9, "d")
    apply(
        log,
        10,
        "queue.finished",
        None,
        {"invocationId": "d", "outcome": "stopped", "finishedAtMs": True},
    )
    assert [(s.invocation_id, s.finished_at_ms) for s in log.settled[2:]] == [("d", None)]


def test_an_invocation_whose_turn_committed_rows_is_not_listed() -> None:
    log = new_log()
    _admit(log, 1, "a")
    apply(log, 2, "queue.started", None, {"invocationId": "a"})
    apply(log, 3, "queue.stop", None, {"invocationId": "a", "operation": "stop-1"})
    # A tool had run: the checkpoint keeps the input and the completion.
    apply(log, 4, "turn.input", "t-1", {})
    apply(log, 5, "model.completion", "t-1", {})
    assert log.turn_rows == {"t-1": 2}
    apply(log, 6, "turn.settled", "t-1", {"outcome": "checkpointed", "rows": 2})
    apply(log, 7, "queue.finished", "t-1", {"invocationId": "a", "outcome": "stopped"})
    assert log.settled == [] and log.turn_rows == {}
    # Completed work is in history too; another turn's rows do not count for it.
    _admit(log, 8, "b")
    apply(log, 9, "queue.started", None, {"invocationId": "b"})
    apply(log, 10, "turn.input", "t-2", {})
    apply(log, 11, "queue.finished", "t-2", {"invocationId": "b", "outcome": "completed"})
    _admit(log, 12, "c")
    apply(log, 13, "queue.started", None, {"invocationId": "c"})
    apply(log, 14, "turn.input", "t-9", {})
    apply(log, 15, "queue.finished", "t-3", {"invocationId": "c", "outcome": "failed"})
    assert [s.invocation_id for s in log.settled] == ["c"]


def test_the_newest_settled_invocations_are_kept_and_prompts_are_clipped() -> None:
    log = SessionLog.from_config("s-1", CONFIG, created_at=0.0, capacity=4)
    sequence = 0
    for n in range(MAX_SETTLED_INVOCATIONS + 5):
        sequence += 1
        _admit(log, sequence, f"i{n}", "é" * (MAX_SETTLED_TEXT_CHARS + n))
        sequence += 1
        apply(
            log, sequence, "queue.finished", None, {"invocationId": f"i{n}", "outcome": "stopped"}
        )
    assert len(log.settled) == MAX_SETTLED_INVOCATIONS
    assert [s.invocation_id for s in log.settled] == [
        f"i{n}" for n in range(5, MAX_SETTLED_INVOCATIONS + 5)
    ]
    assert all(len(s.text) == MAX_SETTLED_TEXT_CHARS and s.clipped for s in log.settled)
    log2 = new_log()
    _admit(log2, 1, "a", "é" * MAX_SETTLED_TEXT_CHARS)
    apply(log2, 2, "queue.finished", None, {"invocationId": "a", "outcome": "stopped"})
    assert not log2.settled[0].clipped
    # Copied turns that never finish an invocation do not pile up.
    for n in range(200):
        apply(log2, 3 + n, "turn.input", f"copied-{n}", {"copied": True})
    assert len(log2.turn_rows) == MAX_TURNS_COUNTED
    assert "copied-199" in log2.turn_rows and "copied-0" not in log2.turn_rows


def test_a_settled_invocation_reaches_the_queue_snapshot_on_the_wire() -> None:
    log = new_log()
    _admit(log, 1, "a", "hello <b>there</b>")
    payload = {"invocationId": "a", "outcome": "stopped", "stopOperation": "web-1"}
    apply(log, 2, "queue.finished", None, dict(payload, finishedAtMs=5))

    async def never(*_: Any) -> Any:
        raise AssertionError("nothing is appended")

    snapshot = HostSession(log, never).queue_snapshot()
    assert to_wire(snapshot)["settled"] == [
        {
            "invocationId": "a",
            "operation": "op-a",
            "work": "send",
            "text": "hello <b>there</b>",
            "textClipped": False,
            "outcome": "stopped",
            "started": False,
            "finishedSequence": 2,
            "stopOperation": "web-1",
            "finishedAtMs": 5,
        }
    ]
    # What the Host sends is what a checked decoding accepts.
    assert from_wire(QueueSnapshot, to_wire(snapshot)) == snapshot
