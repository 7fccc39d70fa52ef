"""Local plugins: isolated import, registration, typed load errors, captured warnings."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emelex.app import Agent, Engine, Harness, InvalidPlugin
from emelex.app._plugins import (
    PluginError,
    PluginIntegration,
    load_plugin,
)
from emelex.testing import Call, Say, ScriptedModel, Step

from .helpers import text_of

FIXTURES = Path(__file__).parent.parent / "fixtures" / "plugins"


def make_plugin(root: Path, name: str, code: str, manifest: str | None = None) -> Path:
    folder = root / name
    folder.mkdir()
    (folder / "plugin.toml").write_text(
        manifest if manifest is not None else f'name = "{name}"\nentry = "main:register"\n'
    )
    (folder / "main.py").write_text(code)
    return folder


def test_a_plugin_contributes_tools_prompt_and_captured_warnings() -> None:
    plugin = load_plugin(FIXTURES / "greeter")
    assert plugin.name == "greeter"
    assert plugin.version == "1.2.0"
    assert [t.definition.name for t in plugin.tools] == ["greet"]
    assert plugin.prompt_sections == ("## Greeter\nUse the greet tool to greet people.",)
    [warning] = plugin.warnings
    assert warning.category == "DeprecationWarning"
    assert "deprecated" in warning.message
    assert warning.file is not None and warning.file.endswith("greeter.py")
    assert warning.line == 18


def test_each_load_is_isolated_under_a_unique_module_name() -> None:
    first = load_plugin(FIXTURES / "greeter")
    second = load_plugin(FIXTURES / "greeter")
    assert first.tools[0] is not second.tools[0]
    import sys

    assert "greeter" not in sys.modules


def test_a_package_plugin_with_relative_imports_and_an_agent_tool() -> None:
    plugin = load_plugin(FIXTURES / "pkgplugin")
    assert [t.definition.name for t in plugin.tools] == ["shout"]
    assert plugin.warnings == ()


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    folder = make_plugin(tmp_path, "broken", "def register(plugin):\n    pass\n\ndef oops(:\n")
    with pytest.raises(PluginError) as caught:
        load_plugin(folder)
    assert caught.value.file == str((folder / "main.py").resolve())
    assert caught.value.line == 4
    assert "SyntaxError" in str(caught.value)
    assert "main.py:4" in str(caught.value)


def test_an_exception_in_the_entry_names_the_innermost_plugin_line(tmp_path: Path) -> None:
    code = "def helper():\n    return {}['missing']\n\n\ndef register(plugin):\n    helper()\n"
    folder = make_plugin(tmp_path, "raising", code)
    with pytest.raises(PluginError) as caught:
        load_plugin(folder)
    assert caught.value.line == 2
    assert "KeyError" in str(caught.value)


def test_an_import_failure_is_a_plugin_error(tmp_path: Path) -> None:
    folder = make_plugin(tmp_path, "importer", "import no_such_module_here\n")
    with pytest.raises(PluginError) as caught:
        load_plugin(folder)
    assert caught.value.line == 1
    assert "ModuleNotFoundError" in str(caught.value)


@pytest.mark.parametrize(
    ("manifest", "line", "words"),
    [
        ('name = "x"\nentry = \n', 2, "invalid TOML"),
        ('name = "x"\nentry = "nocolon"\n', None, "module:function"),
        ('name = "Bad Name"\nentry = "main:register"\n', None, "plugin name"),
        ('name = "x"\nentry = "main:register"\nextra = 1\n', None, "unknown keys"),
        ('name = "x"\nentry = "main:missing"\n', None, "no function 'missing'"),
        ('name = "x"\nentry = "other:register"\n', None, "has no other.py"),
    ],
)
def test_manifest_problems_are_typed_errors(
    tmp_path: Path, manifest: str, line: int | None, words: str
) -> None:
    folder = make_plugin(tmp_path, "x", "def register(plugin):\n    pass\n", manifest)
    with pytest.raises(PluginError) as caught:
        load_plugin(folder)
    assert caught.value.line == line
    assert words in str(caught.value)


def test_a_missing_folder_or_manifest(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match="does not exist"):
        load_plugin(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PluginError, match=r"no plugin\.toml"):
        load_plugin(tmp_path / "empty")


def test_registry_refuses_bad_tools_and_prompts(tmp_path: Path) -> None:
    folder = make_plugin(tmp_path, "badtool", "def register(plugin):\n    plugin.tool(42)\n")
    with pytest.raises(PluginError):
        load_plugin(folder)
    folder = make_plugin(tmp_path, "blank", "def register(plugin):\n    plugin.prompt('  ')\n")
    with pytest.raises(PluginError, match="non-blank"):
        load_plugin(folder)


def test_registry_warn_is_a_warning(tmp_path: Path) -> None:
    code = "def register(plugin):\n    plugin.warn('half configured')\n"
    plugin = load_plugin(make_plugin(tmp_path, "warner", code))
    assert [str(w) for w in plugin.warnings] == ["plugin warner: PluginWarning: half configured"]


def agent_with(*plugins: Path, rounds: list[list[Step]] | None = None) -> Agent:
    builder = Agent.builder().name("plugged").instructions("Be helpful.")
    builder.model(ScriptedModel(rounds or [[Say("ok")]]))
    for plugin in plugins:
        builder.plugin(plugin)
    return builder.build()


async def test_the_integration_adds_tools_prompt_and_warnings_to_inspect() -> None:
    agent = agent_with(FIXTURES / "greeter", FIXTURES / "pkgplugin")
    integration = PluginIntegration()
    async with Engine(integrations=[integration]) as engine:
        session = await engine.create(agent).harness(Harness.base()).start()
        context = await session.inspect()
        assert context.tool_names == ("greet", "shout")
        prompt = context.system_prompt or ""
        assert "## Greeter" in prompt
        assert "## Plugin warnings" in prompt
        assert "DeprecationWarning" in prompt
        assert [w.category for w in integration.warnings[session.session_id]] == [
            "DeprecationWarning"
        ]
        await session.aclose()
        assert session.session_id not in integration.warnings


async def test_warnings_can_stay_out_of_the_prompt() -> None:
    agent = agent_with(FIXTURES / "greeter")
    async with Engine(integrations=[PluginIntegration(warnings_in_prompt=False)]) as engine:
        context = await engine.create(agent).inspect()
        assert "Plugin warnings" not in (context.system_prompt or "")
        assert "## Greeter" in (context.system_prompt or "")


async def test_a_session_calls_a_plugin_tool() -> None:
    rounds: list[list[Step]] = [
        [Call("greet", {"name": "Ada"})],
        [Say("done")],
    ]
    agent = agent_with(FIXTURES / "greeter", rounds=rounds)
    async with Engine(integrations=[PluginIntegration()]) as engine:
        session = await engine.create(agent).start()
        turn = await session.send_and_wait("greet Ada")
        tool_message = [m for m in session.history if m.role == "tool"]
        assert tool_message and "Hello, Ada!" in text_of(tool_message[0])
        assert turn is not None


async def test_a_broken_plugin_fails_the_session_start(tmp_path: Path) -> None:
    folder = make_plugin(tmp_path, "broken", "raise RuntimeError('boom')\n")
    agent = agent_with(folder)
    async with Engine(integrations=[PluginIntegration()]) as engine:
        with pytest.raises(PluginError, match="boom") as caught:
            await engine.create(agent).start()
        assert caught.value.line == 1
        assert engine.sessions == ()


async def test_without_an_integration_the_default_loads_plugins(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "greeter", tmp_path / "greeter")
    agent = agent_with(tmp_path / "greeter")
    async with Engine() as engine:
        session = await engine.create(agent).start()
        assert "greet" in (await session.inspect()).tool_names


def test_a_syntax_error_fails_build_with_file_and_line(tmp_path: Path) -> None:
    folder = make_plugin(tmp_path, "typo", "def register(plugin)\n    pass\n")
    with pytest.raises(PluginError) as caught:
        agent_with(folder)
    assert caught.value.line == 1
    assert caught.value.file.endswith("main.py")
    assert isinstance(caught.value, InvalidPlugin)


async def test_warnings_reach_the_session_context() -> None:
    agent = agent_with(FIXTURES / "greeter")
    async with Engine(integrations=[PluginIntegration(warnings_in_prompt=False)]) as engine:
        context = await engine.create(agent).inspect()
        [warning] = context.warnings
        assert "DeprecationWarning" in warning
