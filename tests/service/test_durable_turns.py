"""A call the harness answered with a synthetic result stays valid replay after a Host
restart, on SQLite and on PostgreSQL: an unknown name, a disabled tool, a tool removed
from the agent, invalid arguments, a denied call and an interrupted one.

Each test runs the first turn in one Host, closes it (the graceful close a SIGTERM
starts), opens a new Host on the same store with a new scripted model and sends again:
the turn must complete, and every request the model gets must declare each tool name
its messages call.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import DenyAll, ToolCancellationPolicy
from emelex.agent._retired import RETIRED_DESCRIPTION
from emelex.agent._turn_rules import INTERRUPTED
from emelex.app import Agent, RestartMode
from emelex.contracts import DenyResponse, HistoryRow
from emelex.model import GenerationRequest, ToolDefinition
from emelex.service import Host
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import AgentTool, ToolInvocation, ToolOutput, tool
from tests.service.test_host import until_idle, until_pending

ECHOED: list[str] = []


@tool
async def echo(text: str) -> str:
    """Repeat a text.

    Args:
        text: What to repeat.
    """
    ECHOED.append(text)
    return f"echo {text}"


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note (asks first).

    Args:
        text: What to note.
    """
    return f"noted {text}"


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> str | None:
    """The Host's store: None (its SQLite file) or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return None
    dsn: str = request.getfixturevalue("postgres_dsn")
    return dsn


def helper(
    model: ScriptedModel, tools: Sequence[AgentTool], on_restart: RestartMode = "resume"
) -> Agent:
    builder = Agent.builder().name("helper").instructions("Help.").model(model)
    return builder.tools(tools).approver(DenyAll()).on_restart(on_restart).build()


def declared(request: GenerationRequest) -> dict[str, str]:
    return {t.name: t.description for t in request.tools}


def called(request: GenerationRequest) -> set[str]:
    return {c.name for message in request.messages for c in message.tool_calls}


async def first_turn(
    root: Path, store: str | None, rounds: list[list[Any]], tools: Sequence[AgentTool]
) -> tuple[str, list[HistoryRow]]:
    """Create a session, run one turn of ``rounds``, close the Host: its id and rows."""
    async with Host.open(
        root, agents={"helper": helper(ScriptedModel(rounds), tools)}, store=store
    ) as host:
        session = (await host.create_session("helper", root.parent, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        await until_idle(host, session.id)
        return session.id, list((await host.history(session.id)).rows)


async def after_restart(
    root: Path,
    store: str | None,
    session_id: str,
    tools: Sequence[AgentTool],
    rounds: list[list[Any]] | None = None,
    on_restart: RestartMode = "resume",
) -> tuple[list[HistoryRow], ScriptedModel]:
    """A new Host on the same store sends one more turn: its rows and its model."""
    model = ScriptedModel(rounds or [[Say("after restart")]])
    agents = {"helper": helper(model, tools, on_restart)}
    async with Host.open(root, agents=agents, store=store) as host:
        await host.send(session_id, "once more", operation=f"s-{uuid.uuid4()}")
        await until_idle(host, session_id)
        rows = list((await host.history(session_id)).rows)
    assert model.requests, "the model was never asked"
    for request in model.requests:
        assert called(request) <= set(declared(request)), request.tools
    return rows, model


def tool_rows(rows: Sequence[HistoryRow]) -> list[tuple[str | None, str]]:
    return [(r.tool_name, r.body) for r in rows if r.role == "tool"]


def last_exchange(rows: Sequence[HistoryRow]) -> list[tuple[str, str]]:
    return [(r.role, r.body) for r in rows[-2:]]


async def test_an_unknown_tool_name_survives_a_restart(tmp_path: Path, store: str | None) -> None:
    root = tmp_path / "host"
    rounds: list[list[Any]] = [[Call("no_such_tool", {})], [Say("sorry")]]
    session_id, rows = await first_turn(root, store, rounds, [echo])
    ((name, body),) = tool_rows(rows)
    assert name == "no_such_tool" and body.startswith("unknown tool 'no_such_tool'")
    rows, model = await after_restart(root, store, session_id, [echo])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    assert declared(model.requests[0]) == {
        "echo": "Repeat a text.",
        "no_such_tool": RETIRED_DESCRIPTION,
    }


async def test_a_tool_removed_from_the_agent_behaves_like_an_unknown_name(
    tmp_path: Path, store: str | None
) -> None:
    ECHOED.clear()
    root = tmp_path / "host"
    rounds: list[list[Any]] = [[Call("echo", {"text": "hi"})], [Say("echoed")]]
    session_id, rows = await first_turn(root, store, rounds, [echo])
    assert tool_rows(rows) == [("echo", "echo hi")]
    # The agent no longer has echo: a new call of it gets the unknown-tool result.
    again: list[list[Any]] = [[Call("echo", {"text": "again"})], [Say("after restart")]]
    rows, model = await after_restart(root, store, session_id, [note], again)
    assert last_exchange(rows) == [("tool", rows[-2].body), ("assistant", "after restart")]
    assert rows[-2].body.startswith("unknown tool 'echo' (available: note)")
    assert ECHOED == ["hi"]
    assert declared(model.requests[0])["echo"] == RETIRED_DESCRIPTION


async def test_a_disabled_tool_survives_a_restart(tmp_path: Path, store: str | None) -> None:
    root = tmp_path / "host"
    rounds: list[list[Any]] = [[Call("note", {"text": "x"})], [Say("could not")]]
    agents = {"helper": helper(ScriptedModel(rounds), [echo, note])}
    async with Host.open(root, agents=agents, store=store) as host:
        source = (await host.create_session("helper", tmp_path, operation="c")).session
        revision = (await host.history(source.id)).through
        # The fork narrows the tools: note is in the agent but disabled there.
        fork = await host.fork(source.id, revision=revision, operation="f", tools=["echo"])
        await host.send(fork.session.id, "go", operation="s1")
        await until_idle(host, fork.session.id)
        rows = list((await host.history(fork.session.id)).rows)
    ((name, body),) = tool_rows(rows)
    assert name == "note" and "unavailable" in body
    rows, model = await after_restart(root, store, fork.session.id, [echo, note])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    # Disabled and called by history: declared as itself, still not enabled.
    assert declared(model.requests[0])["note"].startswith("Write a note")
    # echo, the fork's one enabled tool, removed from the agent since: the fork's tools
    # narrow to nothing (never to the agent's other tools), and note stays disabled.
    again: list[list[Any]] = [[Call("note", {"text": "y"})], [Say("after restart")]]
    rows, model = await after_restart(root, store, fork.session.id, [note], again)
    assert rows[-1].body == "after restart"
    assert rows[-2].tool_name == "note" and "unavailable" in rows[-2].body


async def test_invalid_arguments_survive_a_restart(tmp_path: Path, store: str | None) -> None:
    root = tmp_path / "host"
    rounds: list[list[Any]] = [[Call("echo", {"wrong": 1})], [Say("oops")]]
    session_id, rows = await first_turn(root, store, rounds, [echo])
    ((name, body),) = tool_rows(rows)
    assert name == "echo" and "text" in body
    rows, model = await after_restart(root, store, session_id, [echo])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    # Removed after invalid arguments: the same call is kept, its name retired.
    rows, model = await after_restart(root, store, session_id, [note])
    assert declared(model.requests[0])["echo"] == RETIRED_DESCRIPTION


async def test_a_denied_call_survives_a_restart(tmp_path: Path, store: str | None) -> None:
    root = tmp_path / "host"
    rounds: list[list[Any]] = [[Call("note", {"text": "x"})], [Say("denied, fine")]]
    async with Host.open(
        root, agents={"helper": helper(ScriptedModel(rounds), [note])}, store=store
    ) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        interaction = await until_pending(host, session.id)
        await host.respond(session.id, interaction, DenyResponse(reason="not now"), operation="d")
        await until_idle(host, session.id)
        rows = list((await host.history(session.id)).rows)
    ((name, body),) = tool_rows(rows)
    assert name == "note" and "not now" in body
    rows, _ = await after_restart(root, store, session.id, [note])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    # And with note removed from the agent since.
    rows, model = await after_restart(root, store, session.id, [echo])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    assert declared(model.requests[0])["note"] == RETIRED_DESCRIPTION


class Blocking:
    """An interruptible tool that never returns on its own; ``started`` fires when it
    runs (so the test closes the Host mid-call)."""

    def __init__(self) -> None:
        self.started = trio.Event()

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("slow", "Wait for a long time.", {"type": "object"})

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.started.set()
        await trio.sleep_forever()


@pytest.mark.parametrize("on_restart", ["resume", "settle"])
async def test_an_interrupted_call_survives_a_restart(
    tmp_path: Path, store: str | None, on_restart: RestartMode
) -> None:
    root = tmp_path / "host"
    slow = Blocking()
    rounds: list[list[Any]] = [[Call("slow", {})], [Say("never")]]
    agents = {"helper": helper(ScriptedModel(rounds), [slow], on_restart)}
    async with Host.open(root, agents=agents, store=store) as host:
        session = (await host.create_session("helper", tmp_path, operation="c")).session
        await host.send(session.id, "go", operation="s1")
        with trio.fail_after(30):
            await slow.started.wait()
        # Closing the Host now (what SIGTERM does) cancels the turn mid-call.
    # Resumed, the turn goes on after its interrupted call with the next model round.
    later = [[Say("resumed")], [Say("after restart")]] if on_restart == "resume" else None
    rows, model = await after_restart(root, store, session.id, [slow], later, on_restart)
    assert ("slow", INTERRUPTED) in tool_rows(rows)
    assert tool_rows(rows).count(("slow", INTERRUPTED)) == 1
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    texts = [(row.role, row.body) for row in rows if row.role in ("user", "assistant")]
    if on_restart == "resume":
        assert ("assistant", "resumed") in texts
        assert texts.count(("user", "go")) == 1
        assert len(model.requests) == 2
    else:
        assert ("assistant", "resumed") not in texts and len(model.requests) == 1
    # The tool removed since: the interrupted call stays, its name retired.
    rows, model = await after_restart(root, store, session.id, [])
    assert last_exchange(rows) == [("user", "once more"), ("assistant", "after restart")]
    assert declared(model.requests[0]) == {"slow": RETIRED_DESCRIPTION}
