"""A turn waiting for an approval survives its Host: after a graceful close or a
``kill -9`` and a restart, the interaction is still pending (same id, same request),
and answering it continues the turn where it stood — the call that already ran is not
run again, the model is not asked again for that round, the rest of the batch runs.
On SQLite and PostgreSQL, in-process and through ``emelex serve`` with HostClient.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import emelex.service._host as host_module
from emelex.contracts import (
    ApproveResponse,
    DraftUpdated,
    HistoryRow,
    Interaction,
    InteractionsChanged,
    QueueChanged,
    WatchEnded,
)
from emelex.service import Host, HostClient
from emelex.service._store import open_host_store
from emelex.testing import Say, Wait
from tests.service.conftest import served
from tests.service.resume_child import FIRST_ROUND, ledger_lines, resumable_agent
from tests.service.test_host import until_idle

REPO = Path(__file__).parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str | None:
    if request.param == "sqlite":
        return None
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


async def killed_while_pending(root: Path, workspace: Path, store: str | None) -> tuple[str, str]:
    """Run ``resume_child`` until its turn waits for the approval, then SIGKILL it:
    the session id and the pending interaction's id."""
    command = [sys.executable, "-m", "tests.service.resume_child", str(root), str(workspace)]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    process = await trio.lowlevel.open_process(
        [*command, *([store] if store is not None else [])],
        stdout=subprocess.PIPE,
        env=env,
        cwd=str(REPO),
    )
    assert process.stdout is not None
    output = bytearray()
    try:
        with trio.fail_after(60):
            while b"\n" not in output:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, "the child ended before its approval was pending"
                output += chunk
    finally:
        process.send_signal(signal.SIGKILL)
        with trio.fail_after(30):
            await process.wait()
        await process.stdout.aclose()
    word, session_id, interaction_id = output.decode().split()
    assert word == "PENDING"
    return session_id, interaction_id


def check_pending(pending: tuple[Interaction, ...], interaction_id: str) -> Interaction:
    (interaction,) = pending
    assert interaction.id == interaction_id
    assert interaction.state == "pending" and interaction.resolution is None
    assert interaction.tool_call.name == "note"
    assert interaction.tool_call.arguments == {"text": "x"}
    return interaction


def check_resumed(rows: list[HistoryRow], workspace: Path, asked: int) -> None:
    """The turn completed once, each call ran once, the model was asked once more."""
    lines = ledger_lines(workspace)
    assert [line.split()[:2] for line in lines] == [["ledger", "a"], ["note", "x"], ["ledger", "b"]]
    assert len({line.split()[2] for line in lines}) == 3  # three calls, one run each
    tools = [(row.tool_name, row.body) for row in rows if row.role == "tool"]
    assert tools == [
        ("ledger", "ledger wrote a"),
        ("note", "note wrote x"),
        ("ledger", "ledger wrote b"),
    ]
    assert [(row.role, row.body) for row in rows if row.role == "user"] == [("user", "go")]
    assert rows[-1].role == "assistant" and rows[-1].body == "finished"
    assert asked == 1


async def until_asked(host: Host | HostClient, session_id: str, interaction_id: str) -> None:
    """Watch (a Host or a HostClient) until the session's pending question shows."""
    with trio.fail_after(30):
        async with host.watch(session_id) as updates:
            async for update in updates:
                if isinstance(update, InteractionsChanged) and update.pending:
                    check_pending(update.pending, interaction_id)
                    return
                assert not isinstance(update, WatchEnded), update


async def answered_after_restart(
    root: Path,
    workspace: Path,
    store: str | None,
    session_id: str,
    interaction_id: str,
    takeovers: int = 1,
) -> None:
    agent = resumable_agent(workspace, [[Say("finished")]])
    model: Any = agent.client.model
    async with Host.open(root, agents={"helper": agent}, store=store) as host:
        await until_asked(host, session_id, interaction_id)
        pending = (await host.pending_interactions(session_id)).interactions
        check_pending(pending, interaction_id)
        assert len(ledger_lines(workspace)) == 1  # "a" ran before the restart, once
        (running,) = (await host.queue(session_id)).entries
        assert running.state == "running"
        await host.respond(session_id, interaction_id, ApproveResponse(), operation="yes")
        await until_idle(host, session_id)
        rows = list((await host.history(session_id)).rows)
        codes = [d.cause.code for d in (await host.diagnostics(session_id)).diagnostics]
        result = await host.execute_result(session_id, running.invocation_id)
    assert codes == ["resumed"] * takeovers
    assert result is not None and result.status == "completed"
    check_resumed(rows, workspace, len(model.requests))


@pytest.mark.parametrize("how", ["kill -9", "graceful close"])
async def test_a_pending_approval_survives_its_host_and_continues_the_turn(
    tmp_path: Path, store: str | None, how: str
) -> None:
    root, workspace = tmp_path / "host", tmp_path / "work"
    workspace.mkdir()
    if how == "kill -9":
        session_id, interaction_id = await killed_while_pending(root, workspace, store)
    else:
        session_id, interaction_id = await pending_then_closed(root, workspace, store)
    await answered_after_restart(root, workspace, store, session_id, interaction_id)


async def pending_then_closed(root: Path, workspace: Path, store: str | None) -> tuple[str, str]:
    """Start the turn in this process and close its Host once the approval waits."""
    agent = resumable_agent(workspace, [FIRST_ROUND, [Say("never")]])
    async with Host.open(root, agents={"helper": agent}, store=store) as host:
        session = (await host.create_session("helper", workspace, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        with trio.fail_after(30):
            async with host.watch(session.id) as updates:
                async for update in updates:
                    if isinstance(update, InteractionsChanged) and update.pending:
                        return session.id, update.pending[0].id
    raise AssertionError("no interaction arrived")


async def test_a_served_host_continues_a_turn_its_killed_predecessor_left(
    tmp_path: Path,
) -> None:
    root, workspace = tmp_path / "served", tmp_path / "work"
    workspace.mkdir()
    root.mkdir()
    session_id, interaction_id = await killed_while_pending(root / ".emelex", workspace, None)
    agent = resumable_agent(workspace, [[Say("finished")]])
    model: Any = agent.client.model
    async with served(root, {"helper": agent}), HostClient.connect(root=root) as client:
        await until_asked(client, session_id, interaction_id)
        pending = (await client.pending_interactions(session_id)).interactions
        check_pending(pending, interaction_id)
        await client.respond(session_id, interaction_id, ApproveResponse(), operation="yes")
        await until_idle(client, session_id)  # type: ignore[arg-type]  # the same API
        rows = list((await client.history(session_id)).rows)
    check_resumed(rows, workspace, len(model.requests))


async def closed_while_streaming(
    root: Path, workspace: Path, store: str | None, rounds: list[list[Any]], step: int
) -> str:
    """Run ``rounds`` until model step ``step`` streams a draft, then close the Host."""
    agent = resumable_agent(workspace, rounds)
    async with Host.open(root, agents={"helper": agent}, store=store) as host:
        session = (await host.create_session("helper", workspace, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        with trio.fail_after(30):
            async with host.watch(session.id, live=True) as updates:
                async for update in updates:
                    if isinstance(update, DraftUpdated) and update.step == step:
                        return session.id
    raise AssertionError("no draft arrived")


@pytest.mark.parametrize("streaming", ["first round", "after a batch"])
async def test_a_turn_lost_while_the_model_streams_asks_that_round_again(
    tmp_path: Path, store: str | None, streaming: str
) -> None:
    """No journal yet: the turn starts again; after a batch: it resumes with the batch's
    real result and asks the streaming round again. Rows are never duplicated and the
    restarted Host shows no draft of the lost stream."""
    root, workspace = tmp_path / "host", tmp_path / "work"
    workspace.mkdir()
    half = [Say("half an answer"), Wait(600), Say("never")]
    first = [half] if streaming == "first round" else [[FIRST_ROUND[0]], half]
    step = 0 if streaming == "first round" else 1
    session_id = await closed_while_streaming(root, workspace, store, first, step)
    again = [[Say("a whole answer")]]
    if streaming == "first round":
        again = [[FIRST_ROUND[0]], [Say("a whole answer")]]
    agent = resumable_agent(workspace, again)
    model: Any = agent.client.model
    async with Host.open(root, agents={"helper": agent}, store=store) as host:
        seen = await until_idle_live(host, session_id)
        rows = list((await host.history(session_id)).rows)
        codes = [d.cause.code for d in (await host.diagnostics(session_id)).diagnostics]
    assert not any(isinstance(update, DraftUpdated) and "half" in update.text for update in seen)
    assert codes == ["resumed"]
    assert [line.split()[:2] for line in ledger_lines(workspace)] == [["ledger", "a"]]
    assert [(row.role, row.body) for row in rows if row.role != "assistant"] == [
        ("user", "go"),
        ("tool", "ledger wrote a"),
    ]
    assert rows[-1].body == "a whole answer"
    assert len(model.requests) == len(again)
    # The round asked again is the one that streamed: same messages as before the loss.
    assert [m.role for m in model.requests[0].messages][-1] == (
        "user" if streaming == "first round" else "tool"
    )


async def until_idle_live(host: Host, session_id: str) -> list[Any]:
    """Live updates (drafts included) until the session's queue is empty."""
    seen: list[Any] = []
    with trio.fail_after(30):
        async with host.watch(session_id, live=True) as updates:
            async for update in updates:
                seen.append(update)
                if isinstance(update, QueueChanged) and not update.queue.entries:
                    return seen
                assert not isinstance(update, WatchEnded), update
    raise AssertionError("the watch ended")


class _TakeOverGate:
    """A store whose append of the take-over (``queue.resumed``) waits for ``release``
    (``reached`` is set when it does); every other call goes straight through."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.reached = trio.Event()
        self.release = trio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def append_events(self, session_id: str, events: Any, **options: Any) -> Any:
        if any(event.kind == "queue.resumed" for event in events):
            self.reached.set()
            await self.release.wait()
        return await self._inner.append_events(session_id, events, **options)


async def test_a_close_while_the_take_over_commits_leaves_the_turn_for_the_next_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Host begins closing while its runner commits the take-over of a lost turn:
    the resumed turn starts cancelled (it must not wait for its approval for ever, so
    the close ends), and the next Host takes the same question up again."""
    root, workspace = tmp_path / "host", tmp_path / "work"
    workspace.mkdir()
    session_id, interaction_id = await pending_then_closed(root, workspace, None)
    opened = open_host_store  # what the Host module calls, patched there below
    gates: list[_TakeOverGate] = []

    @asynccontextmanager
    async def gated(path: Path, store: str | None) -> Any:
        async with opened(path, store) as inner:
            gates.append(_TakeOverGate(inner))
            yield gates[-1]

    monkeypatch.setattr(host_module, "open_host_store", gated)
    agent = resumable_agent(workspace, [[Say("never")]])
    with trio.fail_after(30):
        async with Host.open(root, agents={"helper": agent}) as host:
            await gates[0].reached.wait()
            host.begin_close()
            gates[0].release.set()
    monkeypatch.setattr(host_module, "open_host_store", opened)
    await answered_after_restart(root, workspace, None, session_id, interaction_id, takeovers=2)
