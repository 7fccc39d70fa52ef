"""Helpers shared by the adversarial suite: direct tool invocations and a loop ticker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from emelex.model import ToolCall
from emelex.runtime import AgentCancellation
from emelex.tools import AgentTool, ToolInvocation, ToolOutput
from emelex.tools.workspace import Workspace


@pytest.fixture
def root(tmp_path: Path) -> Path:
    directory = tmp_path / "ws"
    directory.mkdir()
    return directory


@pytest.fixture
def ws(root: Path) -> Iterator[Workspace]:
    with Workspace.open(root) as workspace:
        yield workspace


def invocation(
    tool: AgentTool,
    arguments: dict[str, Any],
    *,
    approved: bool = False,
    cancellation: AgentCancellation | None = None,
) -> ToolInvocation:
    return ToolInvocation(
        ToolCall("call-1", tool.definition.name, arguments),
        cancellation or AgentCancellation(),
        "turn",
        "session",
        approved=approved,
    )


async def invoke(tool: AgentTool, arguments: dict[str, Any], **kwargs: Any) -> ToolOutput:
    return await tool.invoke(invocation(tool, arguments, **kwargs))


@attrs.define
class Ticker:
    """Ticks every ``period`` seconds on the Trio loop and records the longest gap: a
    loop held by a worker shows up as one long gap."""

    period: float = 0.005
    ticks: int = 0
    longest_gap: float = 0.0

    async def run(self) -> None:
        last = trio.current_time()
        while True:
            await trio.sleep(self.period)
            now = trio.current_time()
            self.longest_gap = max(self.longest_gap, now - last)
            self.ticks += 1
            last = now
