"""Packages name hooks and sub-agents by reference to host code (``module:attribute``),
imported only from modules the host allows, checked at load with line-numbered
problems, and shown by ``inspect()``."""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from emelex.app import (
    Engine,
    InvalidPackage,
    PackageError,
    export_agent,
    load_package,
    validate_package,
)

HOST_CODE = """
from emelex.agent import Hook, ReplaceResult, ToolOutput
from emelex.app import Agent
from emelex.testing import Say, ScriptedModel


class Redact(Hook):
    async def after_tool_result(self, ctx, call, output):
        return ReplaceResult(ToolOutput(output.text.replace("sk-", "[redacted]-")))


class NeedsArgument(Hook):
    def __init__(self, value):
        self.value = value


NOT_A_HOOK = 42


def reader():
    return (
        Agent.builder()
        .name("reader")
        .instructions("Read and report.")
        .model(ScriptedModel([[Say("read it")]]))
        .build()
    )
"""


@pytest.fixture
def host_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An importable module of host code, under a unique name."""
    name = f"emelex_host_{uuid.uuid4().hex[:8]}"
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / f"{name}.py").write_text(HOST_CODE)
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    yield name
    sys.modules.pop(name, None)


def package(root: Path, body: str) -> Path:
    root.mkdir(parents=True)
    # The references first: top-level keys (``hooks = 3``) must precede any table.
    (root / "agent.toml").write_text(textwrap.dedent(body) + '\n[agent]\nname = "lead"\n')
    (root / "instructions.md").write_text("Lead the work.\n")
    return root


def test_a_package_loads_its_hooks_and_sub_agents(tmp_path: Path, host_module: str) -> None:
    root = package(
        tmp_path / "lead",
        f"""
        [[hooks]]
        ref = "{host_module}:Redact"

        [[subagents]]
        ref = "{host_module}:reader"
        name = "ask_reader"
        description = "Ask the reader."
        max_rounds = 4
        timeout = 30
        """,
    )
    loaded = load_package(root, modules=[host_module])
    agent = loaded.agent
    assert [hook.name for hook in agent.hooks] == ["Redact"]
    (tool,) = agent.tools
    assert tool.definition.name == "ask_reader"
    assert (tool.agent.name, tool.max_rounds, tool.timeout) == ("reader", 4, 30)  # type: ignore[attr-defined]
    assert validate_package(root, modules=[host_module]) == []
    # An agent with code attached cannot be written back as a package.
    with pytest.raises(PackageError, match="hooks"):
        export_agent(agent, tmp_path / "out")


async def test_inspect_shows_hooks_and_sub_agents(tmp_path: Path, host_module: str) -> None:
    root = package(
        tmp_path / "lead",
        f"""
        [[hooks]]
        ref = "{host_module}:Redact"

        [[subagents]]
        ref = "{host_module}:reader"
        name = "ask_reader"
        description = "Ask the reader."
        """,
    )
    agent = load_package(root, modules=[host_module]).agent
    async with Engine() as engine:
        context = await engine.create(agent).inspect("hi")
    assert context.hooks == ("Redact",)
    assert context.subagents == (("ask_reader", "reader"),)
    assert "ask_reader" in context.tool_names


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('[[hooks]]\nref = "no colon"\n', "bad-reference"),
        ('[[hooks]]\nref = "{m}:Missing"\n', "unresolved-reference"),
        ('[[hooks]]\nref = "emelex_no_such_module_x:Hook"\n', "untrusted-reference"),
        ('[[hooks]]\nref = "{m}:NOT_A_HOOK"\n', "bad-reference"),
        ('[[hooks]]\nref = "{m}:NeedsArgument"\n', "bad-reference"),
        ('[[hooks]]\nref = "{m}:Redact"\nwhen = "always"\n', "unknown-key"),
        ('[[subagents]]\nref = "{m}:Redact"\nname = "x"\ndescription = "d"\n', "bad-reference"),
        ('[[subagents]]\nref = "{m}:reader"\nname = "bad name"\ndescription = "d"\n', "bad-value"),
        ('[[subagents]]\nref = "{m}:reader"\nname = "x"\n', "bad-value"),
        ("hooks = 3\n", "bad-value"),
    ],
)
def test_bad_references_are_typed_problems(
    tmp_path: Path, host_module: str, body: str, code: str
) -> None:
    root = package(tmp_path / "lead", body.replace("{m}", host_module))
    with pytest.raises(InvalidPackage) as caught:
        load_package(root, modules=[host_module])
    assert code in [problem.code for problem in caught.value.problems]
    assert code in [p.code for p in validate_package(root, modules=[host_module])]


def test_nothing_is_imported_from_a_module_the_host_did_not_allow(
    tmp_path: Path, host_module: str
) -> None:
    root = package(tmp_path / "lead", f'[[hooks]]\nref = "{host_module}:Redact"\n')
    with pytest.raises(InvalidPackage) as caught:
        load_package(root)  # no modules allowed
    (problem,) = caught.value.problems
    assert problem.code == "untrusted-reference" and problem.line == 2
    assert host_module not in sys.modules
    # A dotted prefix allows the modules below it, never a sibling that shares a prefix.
    with pytest.raises(InvalidPackage):
        load_package(root, modules=[host_module[:-1]])
    assert host_module not in sys.modules
