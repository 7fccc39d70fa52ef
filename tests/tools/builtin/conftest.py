"""Shared helpers: run scripted tool calls through a real AgentSession turn."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from emelex.agent import (
    AgentEvent,
    AgentSession,
    AgentSessionBuilder,
    ApprovalPolicy,
    ApprovalRequested,
    ToolCompleted,
)
from emelex.model import Message, TextPart
from emelex.testing import Call, Say, ScriptedModel
from emelex.tools import ToolOutput

Configure = Callable[[AgentSessionBuilder], AgentSessionBuilder]


def text_of(message: Message) -> str:
    return "".join(part.text for part in message.content if isinstance(part, TextPart))


@attrs.define
class Outcome:
    """A finished turn: the session, the model, every event, the tool results."""

    session: AgentSession
    model: ScriptedModel
    events: list[AgentEvent]

    @property
    def tool_messages(self) -> list[str]:
        """Texts of the tool messages committed to history, in order."""
        return [text_of(m) for m in self.session.history if m.role == "tool"]

    @property
    def outputs(self) -> list[ToolOutput]:
        return [e.output for e in self.events if isinstance(e, ToolCompleted)]

    @property
    def executed(self) -> list[bool]:
        return [e.executed for e in self.events if isinstance(e, ToolCompleted)]

    @property
    def reasons(self) -> list[str]:
        return [e.reason for e in self.events if isinstance(e, ApprovalRequested)]

    @property
    def advertised(self) -> list[str]:
        return [tool.name for tool in self.model.requests[0].tools]


@pytest.fixture
def ws_root(tmp_path: Path) -> Path:
    """The workspace directory (with an ``outside`` sibling the tools must not reach)."""
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "note.txt").write_text("outside content\n")
    return root


@pytest.fixture
def outside_dir(ws_root: Path) -> Path:
    return ws_root.parent / "outside"


Runner = Callable[..., Any]


@pytest.fixture
def run_calls(ws_root: Path) -> Iterator[Runner]:
    """``await run_calls(calls, approvals, configure=...)``: one turn whose first model
    round makes ``calls`` (all in one batch), then answers "done"."""

    async def run(
        calls: Sequence[Call],
        approvals: ApprovalPolicy | None = None,
        *,
        configure: Configure | None = None,
        timeout: float = 30,  # noqa: ASYNC109 - a test bound, not an API
    ) -> Outcome:
        model = ScriptedModel([list(calls), [Say("done")]])
        builder = AgentSession.builder(model, ws_root)
        if approvals is not None:
            builder = builder.approval_policy(approvals)
        if configure is not None:
            builder = configure(builder)
        events: list[AgentEvent] = []
        session = builder.build()
        sessions.append(session)
        with trio.fail_after(timeout):
            await session.run("go", on_event=events.append)
        return Outcome(session, model, events)

    sessions: list[AgentSession] = []
    yield run
    for session in sessions:
        session.close()
