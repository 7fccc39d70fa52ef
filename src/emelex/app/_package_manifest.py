"""Reading and checking a package's ``agent.toml``: every problem is reported with its
line, so a person can fix the manifest in one pass."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

from emelex.app._agent import AGENT_NAME, RESTART_MODES
from emelex.app._capabilities import BUILTIN_OPTIONS
from emelex.app._package_format import (
    BINDING_NAME,
    KEYS,
    MANIFEST,
    POLICIES,
    PRESETS,
    VERSION,
)
from emelex.app._package_info import DEFAULTS, WRITING_PRESETS
from emelex.app._package_refs import check_references
from emelex.app._package_tree import PackageRead
from emelex.model import GenerationOptions

_SECRET_KEY = re.compile(
    r"(?i)^(api[_-]?key|(access|auth|bearer|refresh)?[_-]?token|(client[_-]?)?secret"
    r"|password|passwd|credentials?|authorization|headers?)$"
)
_SECRET_URL = re.compile(r"(?i)[a-z][a-z0-9+.-]*://[^/\s@]+@|[?&](api[_-]?key|key|token|sig)=")
_TOML_LINE = re.compile(r"at line (\d+)")


def line_of(text: str, key: str) -> int | None:
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=|^\s*\[+\s*{re.escape(key)}\s*\]+")
    for number, line in enumerate(text.splitlines(), 1):
        if pattern.search(line):
            return number
    return None


def read_manifest(read: PackageRead) -> None:
    path = read.root / MANIFEST
    if path.is_symlink():
        return
    if not path.is_file():
        read.problem(MANIFEST, "missing-manifest", "the package has no agent.toml")
        return
    content = read.read_file(path)
    if content is None:
        return
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        read.problem(MANIFEST, "bad-toml", f"not UTF-8 text: {exc.reason}")
        return
    try:
        manifest = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _TOML_LINE.search(str(exc))
        line = int(match.group(1)) if match else None
        read.problem(MANIFEST, "bad-toml", f"invalid TOML: {exc}", line)
        return
    read.manifest = manifest
    read.manifest_text = text
    _check_manifest(read, text, manifest)


def _check_manifest(read: PackageRead, text: str, manifest: dict[str, Any]) -> None:
    def bad(code: str, message: str, key: str) -> None:
        read.problem(MANIFEST, code, message, line_of(text, key))

    for key in manifest:
        if key not in KEYS[""]:
            bad("unknown-key", f"unknown table or key {key!r}", key)
    for table in ("agent", "model", "harness", "workspace", "plugins"):
        value = manifest.get(table, {})
        if not isinstance(value, dict):
            bad("bad-value", f"{table} must be a table", table)
            manifest[table] = {}
            continue
        for key in value:
            if key not in KEYS[table]:
                bad("unknown-key", f"unknown key {table}.{key}", key)
    _check_secrets(read, text, manifest, "")
    agent = manifest.get("agent", {})
    if "agent" not in manifest:
        read.problem(MANIFEST, "missing-key", "the manifest has no [agent] table")
    name = agent.get("name")
    if name is None:
        if "agent" in manifest:
            bad("missing-key", "agent.name is required", "agent")
    elif not isinstance(name, str) or not AGENT_NAME.fullmatch(name):
        bad("bad-name", f"agent name {name!r} must be 1-64 letters, digits, _ . -", "name")
    description = agent.get("description", DEFAULTS.description)
    if not isinstance(description, str):
        bad("bad-value", "agent.description must be text", "description")
    version = agent.get("version", DEFAULTS.version)
    if not isinstance(version, str) or not VERSION.fullmatch(version):
        bad("bad-value", f"agent.version {version!r} is not a version", "version")
    model = manifest.get("model", {})
    binding = model.get("binding", DEFAULTS.binding)
    if not isinstance(binding, str) or not BINDING_NAME.fullmatch(binding):
        bad(
            "bad-binding",
            f"model binding {binding!r} must be a symbolic name (lowercase, digits, _ . -)",
            "binding",
        )
    for key in ("max_tokens", "temperature", "top_p", "seed", "stop"):
        if key in model:  # one check per key, so every bad option is reported
            try:
                generation_options({key: model[key]})
            except ValueError as exc:
                bad("bad-value", str(exc), key)
    preset = manifest.get("harness", {}).get("preset", DEFAULTS.preset)
    if preset not in PRESETS:
        bad("unknown-preset", f"harness preset {preset!r} is not one of {PRESETS}", "preset")
    on_restart = manifest.get("harness", {}).get("on_restart", "resume")
    if on_restart not in RESTART_MODES:
        bad(
            "bad-value",
            f"harness.on_restart {on_restart!r} is not one of {RESTART_MODES}",
            "on_restart",
        )
    workspace = manifest.get("workspace", {})
    policy = workspace.get("policy", "read_only")
    if policy not in POLICIES:
        bad("bad-policy", f"workspace policy {policy!r} is not one of {POLICIES}", "policy")
    hidden = workspace.get("hidden", [])
    if not isinstance(hidden, list) or not all(isinstance(h, str) and h for h in hidden):
        bad("bad-value", "workspace.hidden must be a list of glob patterns", "hidden")
    if not isinstance(workspace.get("recursive_delete", False), bool):
        bad("bad-value", "workspace.recursive_delete must be true or false", "recursive_delete")
    if preset in WRITING_PRESETS and policy != "read_write":
        bad("bad-policy", f"the {preset} preset needs workspace policy read_write", "policy")
    _check_capabilities(read, text, manifest.get("capabilities", []), policy)
    check_references(read, text, manifest)
    paths = manifest.get("plugins", {}).get("paths", [])
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        bad("bad-value", "plugins.paths must be a list of package-relative paths", "paths")
    else:
        seen: set[str] = set()
        for plugin in paths:
            parts = plugin.split("/")
            if plugin.startswith("/") or ".." in parts or "\\" in plugin:
                bad("path-escape", f"plugin path {plugin!r} leaves the package", "paths")
                continue
            if plugin in seen:
                bad("duplicate", f"plugin {plugin!r} is listed twice", "paths")
            seen.add(plugin)
            if not (read.root / plugin / "plugin.toml").is_file():
                bad("missing-plugin", f"plugin {plugin!r} has no plugin.toml", "paths")


def _check_secrets(read: PackageRead, text: str, value: Any, where: str) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else key
            if _SECRET_KEY.search(key):
                read.problem(
                    MANIFEST,
                    "credential",
                    f"{path} looks like a credential; bind models by name instead",
                    line_of(text, key),
                )
            _check_secrets(read, text, item, path)
    elif isinstance(value, list):
        for item in value:
            _check_secrets(read, text, item, where)
    elif isinstance(value, str) and _SECRET_URL.search(value):
        read.problem(
            MANIFEST,
            "credential",
            f"{where} holds a URL with credentials; packages carry no secrets",
            line_of(text, where.rsplit(".", 1)[-1]),
        )


def _check_capabilities(read: PackageRead, text: str, capabilities: Any, policy: Any) -> None:
    def bad(code: str, message: str, key: str = "capabilities") -> None:
        read.problem(MANIFEST, code, message, line_of(text, key))

    if not isinstance(capabilities, list) or not all(isinstance(c, dict) for c in capabilities):
        bad("bad-value", "capabilities must be an array of tables ([[capabilities]])")
        return
    seen: set[str] = set()
    for entry in capabilities:
        for key in entry:
            if key not in KEYS["capabilities"]:
                bad("unknown-key", f"unknown key capabilities.{key}", key)
        cid = entry.get("id")
        if not isinstance(cid, str):
            bad("missing-key", "every capability needs an id")
            continue
        if cid not in BUILTIN_OPTIONS:
            bad("unknown-capability", f"capability {cid!r} is not one of {sorted(BUILTIN_OPTIONS)}")
            continue
        if cid in seen:
            bad("duplicate", f"capability {cid!r} is listed twice")
        seen.add(cid)
        if cid == "shell" and policy != "read_write":
            bad("bad-policy", "the shell capability needs workspace policy read_write")
        options = entry.get("options", {})
        if not isinstance(options, dict):
            bad("bad-value", f"capability {cid!r}: options must be a table")
            continue
        checks = BUILTIN_OPTIONS[cid]
        for key, value in options.items():
            if key not in checks:
                bad("unknown-key", f"capability {cid!r} has no option {key!r}", key)
                continue
            try:
                checks[key](value)
            except ValueError as exc:
                bad("bad-value", f"capability {cid!r} option {key!r} {exc}", key)


def generation_options(model: Mapping[str, Any]) -> GenerationOptions:
    def number(key: str, kind: type | tuple[type, ...]) -> Any:
        value = model.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise ValueError(f"model.{key} must be a number")
        return value

    max_tokens = number("max_tokens", int)
    if max_tokens is not None and max_tokens < 1:
        raise ValueError("model.max_tokens must be positive")
    stop = model.get("stop", [])
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
        raise ValueError("model.stop must be a list of strings")
    temperature = number("temperature", (int, float))
    top_p = number("top_p", (int, float))
    return GenerationOptions(
        max_tokens=max_tokens,
        temperature=None if temperature is None else float(temperature),
        top_p=None if top_p is None else float(top_p),
        seed=number("seed", int),
        stop=tuple(stop),
    )


__all__ = ["generation_options", "line_of", "read_manifest"]
