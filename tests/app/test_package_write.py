"""The agent.toml writer: tomlkit does the escaping, the layout is the canonical one."""

from __future__ import annotations

import tomllib
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.agent import DenyAll
from emelex.app import (
    Agent,
    PackageError,
    PackageInfo,
    WorkspacePolicy,
    export_agent,
    load_package,
    manifest_text,
)
from emelex.app._package_write import toml_value
from emelex.model import GenerationOptions
from emelex.testing import ScriptedModel

# Written by the hand-made writer this library replaced (commit e195629), byte for byte:
# the switch to tomlkit changed no export of ordinary text.
BEFORE = (
    "[agent]\n"
    'name = "rich.agent-1"\n'
    'description = "A \\"quoted\\" \\\\ description, ünï€ — with emoji 😀"\n'
    'version = "2.0.0-rc.1+b7"\n'
    "\n"
    "[model]\n"
    'binding = "my.model_x"\n'
    "max_tokens = 512\n"
    "temperature = 0.25\n"
    "top_p = 1.0\n"
    "seed = 7\n"
    'stop = ["</s>", "say \\"no\\"", "back\\\\slash", "new\\nline", "ünï€😀"]\n'
    "\n"
    "[harness]\n"
    'preset = "worker"\n'
    "\n"
    "[workspace]\n"
    'policy = "read_write"\n'
    'hidden = ["secret/**", "we\\"ird\\\\name"]\n'
    "recursive_delete = false\n"
    "\n"
    "[[capabilities]]\n"
    'id = "web_fetch"\n'
    "options = { response_bytes = 1000 }\n"
    "\n"
    "[[capabilities]]\n"
    'id = "shell"\n'
    "options = { output_bytes = 32768, timeout_seconds = 300.0 }\n"
    "\n"
    "[[capabilities]]\n"
    'id = "datetime"\n'
    "\n"
    "[plugins]\n"
    'paths = ["plugins/greeter", "plugins/other"]\n'
)


def rich(
    description: str = 'A "quoted" \\ description, ünï€ — with emoji 😀',
) -> tuple[Agent, PackageInfo]:
    agent = (
        Agent.builder()
        .name("rich.agent-1")
        .instructions("x")
        .model(ScriptedModel([]))
        .workspace_policy(WorkspacePolicy.read_write().hide("secret/**").hide('we"ird\\name'))
        .approver(DenyAll())
        .options(
            GenerationOptions(
                max_tokens=512,
                temperature=0.25,
                top_p=1.0,
                seed=7,
                stop=("</s>", 'say "no"', "back\\slash", "new\nline", "ünï€😀"),
            )
        )
        .capability("web_fetch", response_bytes=1000)
        .capability("shell", output_bytes=32768, timeout_seconds=300.0)
        .capability("datetime")
        .build()
    )
    info = PackageInfo(
        description=description, version="2.0.0-rc.1+b7", binding="my.model_x", preset="worker"
    )
    return agent, info


def test_the_manifest_is_byte_identical_to_the_hand_written_writers() -> None:
    agent, info = rich()
    assert manifest_text(agent, info, ["plugins/greeter", "plugins/other"]) == BEFORE


def test_control_characters_are_escaped_and_read_back() -> None:
    # A terminal escape in a description must not reach the file raw (a `cat` of the
    # manifest would run it); the hand-written writer used upper-case \\u escapes, tomlkit
    # uses short forms and lower case: the same TOML value.
    nasty = "title\x1b]0;pwned\x07 clear\x1b[2J del\x7f nul\x00 cr\r tab\t bs\b ff\x0c"
    agent, info = rich(nasty)
    text = manifest_text(agent, info)
    assert all(ch == "\n" or unicodedata.category(ch) != "Cc" for ch in text)
    assert tomllib.loads(text)["agent"]["description"] == nasty


@given(st.text(max_size=200), st.lists(st.text(min_size=1, max_size=20), max_size=5))
def test_any_text_round_trips_through_the_manifest(description: str, stop: list[str]) -> None:
    _, info = rich(description)
    builder = Agent.builder().name("a").instructions("x").model(ScriptedModel([]))
    built = builder.options(GenerationOptions(stop=tuple(stop))).build()
    parsed = tomllib.loads(manifest_text(built, info))
    assert parsed["agent"]["description"] == description
    assert parsed["model"].get("stop", []) == stop


def test_values_tomlkit_cannot_write_are_package_errors() -> None:
    assert toml_value({"b": [1, 2.5], "a": True}) == "{ a = true, b = [1, 2.5] }"
    assert toml_value({}) == "{}"
    for value in (None, object(), b"bytes", {"nested": None}):
        with pytest.raises(PackageError, match="cannot write"):
            toml_value(value)


def test_export_writes_what_load_reads(tmp_path: Path) -> None:
    agent, info = rich()
    export_agent(agent, tmp_path / "out", description=info.description, binding="my.model_x")
    package = load_package(
        tmp_path / "out", bindings={"my.model_x": agent.client}, approver=agent.approver
    )
    assert package.agent == agent
    assert package.info.description == info.description
    export_agent(package, tmp_path / "again")
    again = (tmp_path / "again" / "agent.toml").read_bytes()
    assert again == (tmp_path / "out" / "agent.toml").read_bytes()
