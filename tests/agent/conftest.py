"""Shared fixtures for harness tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from emelex.agent import AgentSession, AgentSessionBuilder
from emelex.model import AgentModel


@pytest.fixture
def make_builder(tmp_path: Path) -> Callable[..., AgentSessionBuilder]:
    """A builder over a temporary workspace with the built-in tools switched off."""

    def make(model: AgentModel, **_: Any) -> AgentSessionBuilder:
        return (
            AgentSession.builder(model, tmp_path)
            .include_file_tools(False)
            .include_shell_tool(False)
        )

    return make
