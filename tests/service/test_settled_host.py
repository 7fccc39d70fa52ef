"""What became of invocations that committed nothing, as every client reads it: the queue
snapshot's ``settled`` (the ``queue`` operation and each watch's ``QueueChanged``), in
process, over the Unix socket and over TCP (``open_host``), and after a restart."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from emelex.contracts import ApproveResponse, QueueChanged, SettledInvocation
from emelex.testing import Call, Fail, Say, Wait
from tests.service.conftest import OpenHost
from tests.service.test_host import NOTES, agent
from tests.service.test_transport_contract import until_idle, until_pending


async def until_running(host: Any, session_id: str) -> str:
    with trio.fail_after(30):
        while True:
            running = [e for e in (await host.queue(session_id)).entries if e.state == "running"]
            if running:
                return str(running[0].invocation_id)
            await trio.sleep(0.02)


def _summary(settled: tuple[SettledInvocation, ...]) -> list[tuple[Any, ...]]:
    return [(s.text, s.outcome, s.started, s.stop_operation, s.work) for s in settled]


async def test_invocations_that_committed_nothing_are_kept_in_the_queue_snapshot(
    tmp_path: Path, open_host: OpenHost
) -> None:
    NOTES.clear()
    rounds = agent(
        [Say("partial"), Wait(3600)],
        [Fail(RuntimeError("model down"))],
        [Call("note", {"text": "kept"})],
        [Wait(3600)],
    )
    root = tmp_path / "root"
    async with open_host(root, agents={"helper": rounds}) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        long = await host.send(session.id, "long " + "x" * 2500, operation="s1")
        assert await until_running(host, session.id) == long.invocation_id
        queued = await host.send(session.id, "queued", operation="s2")
        assert (await host.stop(session.id, queued.invocation_id, operation="stop-q")).outcome == (
            "removedFromQueue"
        )
        assert (await host.stop(session.id, long.invocation_id, operation="stop-r")).outcome == (
            "stopping"
        )
        await until_idle(host, session.id)
        await host.send(session.id, "fail", operation="s3")
        await until_idle(host, session.id)
        # A turn whose tool ran is checkpointed when stopped: it is in history, not here.
        tool = await host.send(session.id, "use the tool", operation="s4")
        interaction_id = await until_pending(host, session.id)
        await host.respond(session.id, interaction_id, ApproveResponse(), operation="r1")
        with trio.fail_after(30):
            while True:  # the tool ran (the Host runs it in this process)
                if NOTES == ["kept"]:
                    break
                await trio.sleep(0.02)
        await host.stop(session.id, tool.invocation_id, operation="stop-t")
        await until_idle(host, session.id)

        settled = (await host.queue(session.id)).settled
        assert _summary(settled) == [
            ("queued", "stopped", False, "stop-q", "send"),
            ("long " + "x" * 1995, "stopped", True, "stop-r", "send"),
            ("fail", "failed", True, None, "send"),
        ]
        assert [s.text_clipped for s in settled] == [False, True, False]
        assert [s.invocation_id for s in settled[:2]] == [
            queued.invocation_id,
            long.invocation_id,
        ]
        assert all(s.finished_at_ms is not None for s in settled)
        assert [s.operation for s in settled] == ["s2", "s1", "s3"]
        # Their places: before every row (nothing else was committed before them), in
        # the order they ended; the checkpointed turn's rows come after.
        rows = (await host.history(session.id)).rows
        assert [r.body for r in rows if r.role == "user"] == ["use the tool"]
        sequences = [s.finished_sequence for s in settled]
        assert sequences == sorted(sequences)
        assert all(r.position.source_sequence > sequences[-1] for r in rows)
        # A watch's first snapshot carries the same.
        with trio.fail_after(30):
            async with host.watch(session.id) as updates:
                async for update in updates:
                    assert isinstance(update, QueueChanged)
                    assert update.queue.settled == settled
                    break
    async with open_host(root, agents={"helper": agent()}) as host:
        assert (await host.queue(session.id)).settled == settled
