"""Local plugins: a folder with ``plugin.toml`` and Python code that contributes tools
and prompt text (see ``docs/app/plugins.md``).

::

    my-plugin/
        plugin.toml     # name = "greeter"; version = "1.0.0"; entry = "greeter:register"
        greeter.py      # def register(plugin): plugin.tool(hello); plugin.prompt("...")

:class:`PluginIntegration` loads the agent's plugins for every session (the default
``Engine()`` uses one when no integration of yours handles plugins):
``Engine(integrations=[PluginIntegration()]).create(agent)`` with
``Agent.builder().plugin(path)``.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import pathlib
import re
import sys
import tomllib
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from emelex.app._agent import check_tool
from emelex.app._errors import PluginError
from emelex.app._integration import Contribution, IntegrationRequest
from emelex.tools import AgentTool

PLUGIN_MANIFEST = "plugin.toml"
PLUGIN_NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
ENTRY = re.compile(
    r"([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*):([A-Za-z_][A-Za-z0-9_]*)"
)
_KEYS = frozenset({"name", "version", "entry", "description"})
#: Bounds on what :func:`check_plugin` compiles (plugins are host configuration, but a
#: path pointing at a huge tree must not stall ``build()``).
MAX_CHECKED_FILES = 512
MAX_SOURCE_BYTES = 4 * 1024 * 1024
_counter = itertools.count(1)


@attrs.frozen
class PluginWarning:
    """A warning raised while a plugin loaded (``warnings.warn`` or
    :meth:`PluginRegistry.warn`)."""

    plugin: str
    message: str
    category: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f" ({self.file}:{self.line})" if self.line is not None else f" ({self.file})"
        return f"plugin {self.plugin}: {self.category}: {self.message}{where}"


class PluginRegistry:
    """What a plugin's entry function receives: register tools and prompt text."""

    def __init__(self, name: str, path: pathlib.Path) -> None:
        self.name = name
        self.path = path
        self._tools: list[AgentTool] = []
        self._prompts: list[str] = []
        self._warnings: list[str] = []

    def tool(self, tool: AgentTool | Callable[..., Any]) -> AgentTool:
        """Add an AgentTool, or an async function (made a tool with ``@tool``).
        Returns the tool, so it also works as a decorator."""
        if not isinstance(tool, AgentTool):
            from emelex.tools import tool as make_tool

            made = make_tool(tool)
            assert isinstance(made, AgentTool)
            tool = made
        check_tool(tool, f"plugin {self.name!r}")
        self._tools.append(tool)
        return tool

    def prompt(self, text: str) -> None:
        """Add a section to the system prompt of sessions that load the plugin."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a plugin prompt section must be non-blank text")
        self._prompts.append(text)

    def warn(self, message: str) -> None:
        """Record a non-fatal problem (shown like a ``warnings.warn`` during load)."""
        self._warnings.append(str(message))


@attrs.frozen
class LoadedPlugin:
    """A plugin after its entry function ran."""

    name: str
    version: str
    path: pathlib.Path
    tools: tuple[AgentTool, ...]
    prompt_sections: tuple[str, ...]
    warnings: tuple[PluginWarning, ...]


def _manifest(root: pathlib.Path) -> dict[str, Any]:
    manifest = root / PLUGIN_MANIFEST
    if not root.is_dir():
        raise PluginError("the plugin directory does not exist", root)
    if not manifest.is_file():
        raise PluginError("the plugin has no plugin.toml", manifest)
    try:
        data = tomllib.loads(manifest.read_text("utf-8"))
    except UnicodeDecodeError as exc:
        raise PluginError(f"not UTF-8 text: {exc.reason}", manifest) from exc
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"at line (\d+)", str(exc))
        raise PluginError(
            f"invalid TOML: {exc}", manifest, int(match.group(1)) if match else None
        ) from exc
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise PluginError(f"unknown keys {unknown}", manifest)
    name, version, entry = data.get("name"), data.get("version", "0.0.0"), data.get("entry")
    if not isinstance(name, str) or not PLUGIN_NAME.fullmatch(name):
        raise PluginError(f"plugin name {name!r} must be lowercase a-z 0-9 _ -", manifest)
    if not isinstance(version, str) or not version.strip():
        raise PluginError("version must be non-blank text", manifest)
    if not isinstance(entry, str) or not ENTRY.fullmatch(entry):
        raise PluginError(f"entry {entry!r} must be 'module:function'", manifest)
    return data


def _module_file(root: pathlib.Path, module: str) -> tuple[pathlib.Path, bool]:
    base = root.joinpath(*module.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py", True
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py"), False
    raise PluginError(f"entry module {module!r} has no {module}.py or package", root)


def _inside(root: pathlib.Path, file: str) -> bool:
    try:
        pathlib.Path(file).resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def _failure(root: pathlib.Path, fallback: pathlib.Path, exc: BaseException) -> PluginError:
    """A PluginError naming the innermost plugin file and line of ``exc``."""
    file: str | None = None
    line: int | None = None
    if isinstance(exc, SyntaxError) and exc.filename and _inside(root, exc.filename):
        file, line = exc.filename, exc.lineno
    else:
        for frame in traceback.extract_tb(exc.__traceback__):
            if _inside(root, frame.filename):
                file, line = frame.filename, frame.lineno
    message = f"{type(exc).__name__}: {exc}"
    return PluginError(message, file or fallback, line)


def _sources(root: pathlib.Path) -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".py"):
                found.append(pathlib.Path(directory, name))
                if len(found) > MAX_CHECKED_FILES:
                    raise PluginError(f"more than {MAX_CHECKED_FILES} Python files", root)
    return found


def check_plugin(path: str | os.PathLike[str]) -> None:
    """Check the plugin at ``path`` without running it: the manifest, the entry module,
    and that every Python file in the folder compiles.

    ``Agent.builder().build()`` calls this, so a plugin with a syntax error fails the
    build (with :class:`PluginError` naming file and line), not a later session start.
    """
    root = pathlib.Path(os.fspath(path)).resolve()
    data = _manifest(root)
    _module_file(root, data["entry"].split(":")[0])
    for source in _sources(root):
        try:
            with source.open("rb") as handle:
                code = handle.read(MAX_SOURCE_BYTES + 1)
        except OSError as exc:
            raise PluginError(f"cannot read: {exc.strerror}", source) from exc
        if len(code) > MAX_SOURCE_BYTES:
            raise PluginError(f"larger than {MAX_SOURCE_BYTES} bytes", source)
        try:
            compile(code, str(source), "exec", dont_inherit=True)
        except SyntaxError as exc:  # IndentationError and TabError too
            raise PluginError(f"{type(exc).__name__}: {exc.msg}", source, exc.lineno) from exc
        except ValueError as exc:  # NUL bytes
            raise PluginError(f"does not compile: {exc}", source) from exc


def load_plugin(path: str | os.PathLike[str]) -> LoadedPlugin:
    """Import the plugin at ``path`` in isolation and run its entry function.

    The entry module is imported from its file under a unique module name (two
    plugins with the same module names never share state, and nothing is added to
    ``sys.path``; no bytecode is written). Loading runs the plugin's code in the
    calling thread: plugins are trusted host configuration. Any failure (manifest,
    syntax, import, the entry function raising, a bad tool) raises
    :class:`PluginError` naming the plugin file and line.
    Warnings issued while loading are captured into :attr:`LoadedPlugin.warnings`.
    """
    root = pathlib.Path(os.fspath(path)).resolve()
    data = _manifest(root)
    module_name, function_name = data["entry"].split(":")
    file, package = _module_file(root, module_name)
    unique = f"emelex_plugin_{data['name'].replace('-', '_')}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(
        unique, file, submodule_search_locations=[str(file.parent)] if package else None
    )
    if spec is None or spec.loader is None:
        raise PluginError("cannot import the entry module", file)
    module = importlib.util.module_from_spec(spec)
    registry = PluginRegistry(data["name"], root)
    write_bytecode = sys.dont_write_bytecode
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sys.modules[unique] = module
        sys.dont_write_bytecode = True  # leave no __pycache__ in the plugin folder
        try:
            spec.loader.exec_module(module)
            entry = getattr(module, function_name, None)
            if not callable(entry):
                raise PluginError(f"the entry module has no function {function_name!r}", file)
            result = entry(registry)
            if result is not None:
                registry.warn(f"the entry function returned {result!r}, which is ignored")
        except PluginError:
            sys.modules.pop(unique, None)
            raise
        except Exception as exc:
            sys.modules.pop(unique, None)
            raise _failure(root, file, exc) from exc
        finally:
            sys.dont_write_bytecode = write_bytecode
    found = [
        PluginWarning(
            data["name"],
            str(item.message),
            item.category.__name__,
            item.filename,
            item.lineno,
        )
        for item in caught
    ]
    found.extend(PluginWarning(data["name"], text, "PluginWarning") for text in registry._warnings)
    names: set[str] = set()
    for tool in registry._tools:
        if tool.definition.name in names:
            raise PluginError(f"two tools are named {tool.definition.name!r}", file)
        names.add(tool.definition.name)
    return LoadedPlugin(
        name=data["name"],
        version=data.get("version", "0.0.0"),
        path=root,
        tools=tuple(registry._tools),
        prompt_sections=tuple(registry._prompts),
        warnings=tuple(found),
    )


def warnings_section(found: Sequence[PluginWarning]) -> str:
    """The prompt section that makes load warnings visible in ``inspect()``."""
    lines = ["## Plugin warnings"]
    lines.extend(f"- {warning}" for warning in found)
    return "\n".join(lines)


class PluginIntegration:
    """An engine :class:`~emelex.app.Integration` that loads each session's
    ``agent.plugins`` (relative paths resolve against the working directory),
    contributing their tools and prompt sections.

    Load warnings are kept per session in :attr:`warnings` and, unless
    ``warnings_in_prompt=False``, added as a ``## Plugin warnings`` prompt section so
    they show in ``session.inspect()``'s system prompt. A plugin that fails to load
    fails the session start with :class:`PluginError`.
    """

    def __init__(self, *, warnings_in_prompt: bool = True) -> None:
        self.warnings_in_prompt = warnings_in_prompt
        self.warnings: dict[str, tuple[PluginWarning, ...]] = {}

    async def open(self, request: IntegrationRequest) -> Contribution:
        tools: list[AgentTool] = []
        prompts: list[str] = []
        found: list[PluginWarning] = []
        for path in request.agent.plugins:
            plugin = load_plugin(path)
            tools.extend(plugin.tools)
            prompts.extend(plugin.prompt_sections)
            found.extend(plugin.warnings)
        if found and self.warnings_in_prompt:
            prompts.append(warnings_section(found))
        session_id = request.session_id
        self.warnings[session_id] = tuple(found)

        async def close() -> None:
            self.warnings.pop(session_id, None)

        extra: dict[str, Any] = {}
        if "warnings" in attrs.fields_dict(Contribution):  # SessionContext.warnings
            extra["warnings"] = [str(warning) for warning in found]
        return Contribution(
            tools=tools, prompt_sections=prompts, handles={"plugins"}, close=close, **extra
        )


__all__ = [
    "LoadedPlugin",
    "PluginError",
    "PluginIntegration",
    "PluginRegistry",
    "PluginWarning",
    "check_plugin",
    "load_plugin",
    "warnings_section",
]
