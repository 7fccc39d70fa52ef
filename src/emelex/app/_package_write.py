"""Writing a package: the canonical ``agent.toml`` and the package folder.

The manifest is written with tomlkit, which escapes every string by the TOML rules and
keeps the layout under our control: one ``[table]`` per part in a fixed order, arrays
on one line, capability options as an inline table ``{ key = value }`` with sorted
keys. The layout is the canonical one the example packages in ``actors/`` are written
in, so exporting them gives byte-identical files.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import tomlkit
import tomlkit.exceptions
import tomlkit.items

from emelex.app._agent import Agent
from emelex.app._capabilities import BuiltinCapability
from emelex.app._errors import PackageError
from emelex.app._package_format import (
    BINDING_NAME,
    INSTRUCTIONS,
    MANIFEST,
    PRESETS,
    SKILL_FILE,
    VERSION,
    LoadedPackage,
    PackageInfo,
)
from emelex.app._package_info import WRITING_PRESETS
from emelex.model import GenerationOptions


def _item(value: Any) -> tomlkit.items.Item:
    """``value`` as a tomlkit item; mappings become ``{ a = 1, b = 2 }`` (sorted keys,
    a space inside each brace: tomlkit's own inline tables have none)."""
    if isinstance(value, Mapping):
        table = tomlkit.inline_table()
        for index, key in enumerate(sorted(value)):
            item = _item(value[key])
            if index == 0:
                item.trivia.indent = " "  # later items get one from tomlkit
            table.append(key, item)
        if value:
            table.append(None, tomlkit.ws(" "))
        return table
    if isinstance(value, list | tuple):
        array = tomlkit.array()
        array.extend(_item(v) for v in value)
        return array
    if value is None or not isinstance(value, bool | int | float | str):
        raise PackageError(f"cannot write {value!r} to agent.toml")
    try:
        return tomlkit.item(value)
    except (ValueError, TypeError, tomlkit.exceptions.TOMLKitError) as exc:
        raise PackageError(f"cannot write {value!r} to agent.toml: {exc}") from exc


def toml_value(value: Any) -> str:
    """One TOML value as it appears in ``agent.toml`` (also the text of a diff)."""
    return _item(value).as_string()


def _table(pairs: Sequence[tuple[str, Any]]) -> tomlkit.items.Table:
    table = tomlkit.table()
    for key, value in pairs:
        table.append(key, _item(value))
    return table


def manifest_text(agent: Agent, info: PackageInfo, plugins: Sequence[str] = ()) -> str:
    """The canonical ``agent.toml`` of ``agent`` (deterministic)."""
    options = agent.options
    model: list[tuple[str, Any]] = [("binding", info.binding)]
    for key in ("max_tokens", "temperature", "top_p", "seed"):
        value = getattr(options, key)
        if value is not None:
            model.append((key, value))
    if options.stop:
        model.append(("stop", list(options.stop)))
    policy = agent.workspace_policy
    document = tomlkit.document()
    document.append(
        "agent",
        _table(
            [("name", agent.name), ("description", info.description), ("version", info.version)]
        ),
    )
    document.append("model", _table(model))
    harness: list[tuple[str, Any]] = [("preset", info.preset)]
    if agent.on_restart != "resume":  # the default is left out, as a manifest may
        harness.append(("on_restart", agent.on_restart))
    document.append("harness", _table(harness))
    document.append(
        "workspace",
        _table(
            [
                ("policy", "read_write" if policy.write else "read_only"),
                ("hidden", list(policy.hidden)),
                ("recursive_delete", policy.recursive_delete),
            ]
        ),
    )
    if agent.capabilities:
        capabilities = tomlkit.aot()
        for capability in agent.capabilities:
            assert isinstance(capability, BuiltinCapability)
            entry: list[tuple[str, Any]] = [("id", capability.id)]
            if capability.options:
                entry.append(("options", dict(capability.options)))
            capabilities.append(_table(entry))
        document.append("capabilities", capabilities)
    if plugins:
        document.append("plugins", _table([("paths", list(plugins))]))
    try:
        text = tomlkit.dumps(document)
    except (ValueError, TypeError, tomlkit.exceptions.TOMLKitError) as exc:
        raise PackageError(f"cannot write agent.toml: {exc}") from exc
    return text


def _exportable(agent: Agent, info: PackageInfo) -> list[str]:
    reasons: list[str] = []
    if agent.tools:
        reasons.append("it has code-defined tools (ship them as a plugin)")
    if agent.hooks:
        reasons.append("it has hooks or guardrails (code: name them in [[hooks]] by hand)")
    if agent.workspace is not None:
        reasons.append("it uses a host workspace directory")
    if agent.mcp_servers:
        reasons.append("it has MCP servers")
    if agent.output_type is not None:
        reasons.append("it has a code-defined output_type (set it again after loading)")
    for capability in agent.capabilities:
        if not isinstance(capability, BuiltinCapability):
            reasons.append(f"capability {capability.id!r} is not a built-in")
    if not isinstance(agent.options.reasoning, type(GenerationOptions().reasoning)):
        reasons.append("it sets reasoning options")
    for skill in agent.skills:
        if "\n" in skill.description or skill.description != skill.description.strip():
            reasons.append(f"skill {skill.name!r} has a multi-line or padded description")
    if info.preset not in PRESETS:
        reasons.append(f"harness preset {info.preset!r} is unknown")
    elif info.preset in WRITING_PRESETS and not agent.workspace_policy.write:
        # the reader refuses such a package: never write one it cannot load
        reasons.append(f"harness preset {info.preset!r} needs a read_write workspace policy")
    if not VERSION.fullmatch(info.version):
        reasons.append(f"version {info.version!r} is not a version")
    if not BINDING_NAME.fullmatch(info.binding):
        reasons.append(f"model binding {info.binding!r} is not a symbolic name")
    for plugin in agent.plugins:
        if not (plugin / "plugin.toml").is_file():
            reasons.append(f"plugin {str(plugin)!r} has no plugin.toml")
    if len({p.name for p in agent.plugins}) != len(agent.plugins):
        reasons.append("two plugins have the same directory name")
    return reasons


def _copy_tree(source: pathlib.Path, dest: pathlib.Path) -> None:
    for entry in sorted(source.rglob("*")):
        if "__pycache__" in entry.parts or entry.is_symlink():
            continue
        target = dest / entry.relative_to(source)
        if entry.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        elif entry.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(entry.read_bytes())


def export_agent(
    agent: Agent | LoadedPackage,
    path: str | os.PathLike[str],
    *,
    description: str | None = None,
    version: str | None = None,
    binding: str | None = None,
    preset: str | None = None,
) -> None:
    """Write ``agent`` as a package at ``path`` (a new or empty directory).

    The output is deterministic: exporting an agent and loading it again gives an
    equal agent, and exporting that gives byte-identical files. The metadata is the
    agent's own (``agent.package``, which :func:`load_package` fills from the manifest
    and ``AgentBuilder.package`` sets); the keyword arguments override it. Refuses
    (:class:`PackageError`) agents with code-defined tools, capability packages, MCP
    servers or a host workspace: those are not portable. Plugins are copied into
    ``plugins/<directory name>``; a skill's files into ``skills/<name>/``.
    """
    if isinstance(agent, LoadedPackage):
        agent = agent.agent
    info = agent.package
    info = attrs.evolve(
        info,
        description=info.description if description is None else description,
        version=info.version if version is None else version,
        binding=info.binding if binding is None else binding,
        preset=info.preset if preset is None else preset,
    )
    reasons = _exportable(agent, info)
    if reasons:
        raise PackageError(f"agent {agent.name!r} cannot be exported: " + "; ".join(reasons))
    root = pathlib.Path(os.fspath(path))
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise PackageError(f"export destination {str(root)!r} exists and is not empty")
    root.mkdir(parents=True, exist_ok=True)
    plugins = [f"plugins/{plugin.name}" for plugin in agent.plugins]
    (root / MANIFEST).write_bytes(manifest_text(agent, info, plugins).encode("utf-8"))
    (root / INSTRUCTIONS).write_bytes(agent.instructions.encode("utf-8"))
    for seed in sorted(agent.files, key=lambda f: (f.readonly, f.path)):
        target = root / ("readonly" if seed.readonly else "files") / seed.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(seed.content)
    for skill in sorted(agent.skills, key=lambda s: s.name):
        folder = root / "skills" / skill.name
        folder.mkdir(parents=True, exist_ok=True)
        description = skill.description
        if len(description) >= 2 and description[0] == description[-1] and description[0] in "'\"":
            quote = "'" if description[0] == '"' else '"'
            description = f"{quote}{description}{quote}"  # the reader strips one pair
        text = f"---\nname: {skill.name}\ndescription: {description}\n---\n"
        (folder / SKILL_FILE).write_bytes((text + skill.instructions).encode("utf-8"))
        for file in skill.files:
            target = folder / file.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(file.content)
    for plugin in agent.plugins:
        _copy_tree(plugin, root / "plugins" / plugin.name)


__all__ = ["export_agent", "manifest_text", "toml_value"]
