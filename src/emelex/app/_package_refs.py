"""Hooks and sub-agents a package names by reference (``module:attribute``).

A package holds no code: a reference names Python code the host has installed, and
it is imported only when the host allowed its module (``modules=`` of
:func:`~emelex.app.load_package`: a module name or a prefix of dotted names). Each
problem is reported with its manifest line, like every other package problem.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Sequence
from typing import Any

from emelex.agent import Hook
from emelex.app._errors import InvalidSubAgent
from emelex.app._package_format import MANIFEST
from emelex.app._package_tree import PackageRead

REFERENCE = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
SUBAGENT_KEYS = frozenset({"ref", "name", "description", "max_rounds", "timeout"})


def _line(text: str, value: str) -> int | None:
    for number, line in enumerate(text.splitlines(), 1):
        if value in line:
            return number
    return None


def check_references(read: PackageRead, text: str, manifest: dict[str, Any]) -> None:
    """Report malformed ``[[hooks]]`` and ``[[subagents]]`` entries (no import)."""
    for table, keys in (("hooks", frozenset({"ref"})), ("subagents", SUBAGENT_KEYS)):
        entries = manifest.get(table, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            read.problem(MANIFEST, "bad-value", f"{table} must be an array of tables")
            manifest[table] = []
            continue
        for entry in entries:
            for key in entry:
                if key not in keys:
                    read.problem(MANIFEST, "unknown-key", f"unknown key {table}.{key}")
            ref = entry.get("ref")
            if not isinstance(ref, str) or not REFERENCE.fullmatch(ref):
                read.problem(
                    MANIFEST,
                    "bad-reference",
                    f"{table}.ref {ref!r} must be 'module:attribute' (dotted names)",
                    _line(text, str(ref)),
                )
        names = [e.get("name") for e in entries if table == "subagents"]
        for name in names:
            if names.count(name) > 1:
                read.problem(MANIFEST, "duplicate", f"two sub-agents are named {name!r}")
                break


def _allowed(module: str, modules: Sequence[str]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in modules)


def _resolve(ref: str, modules: Sequence[str]) -> tuple[Any, str | None, str]:
    """(value, None, "") or (None, problem code, message)."""
    match = REFERENCE.fullmatch(ref)
    assert match is not None  # checked by check_references
    module_name, attribute = match.groups()
    if not _allowed(module_name, modules):
        return (
            None,
            "untrusted-reference",
            f"reference {ref!r} names module {module_name!r}, which the host did not "
            "allow (pass modules=[...] when loading)",
        )
    try:
        value: Any = importlib.import_module(module_name)
    except Exception as exc:
        return None, "unresolved-reference", f"cannot import {module_name!r} for {ref!r}: {exc}"
    for part in attribute.split("."):
        if not hasattr(value, part):
            return None, "unresolved-reference", f"{module_name!r} has no {attribute!r} ({ref!r})"
        value = getattr(value, part)
    return value, None, ""


def resolve_hooks(
    read: PackageRead, text: str, entries: Sequence[dict[str, Any]], modules: Sequence[str]
) -> list[Hook]:
    """The hooks ``entries`` name: a Hook, or a Hook subclass made with no arguments."""
    hooks: list[Hook] = []
    for entry in entries:
        ref = entry["ref"]
        value, code, message = _resolve(ref, modules)
        if code is None and isinstance(value, type) and issubclass(value, Hook):
            try:
                value = value()
            except Exception as exc:
                code, message = "bad-reference", f"hook {ref!r} could not be made: {exc}"
        if code is None and not isinstance(value, Hook):
            code, message = "bad-reference", f"hook {ref!r} is {value!r}, not a Hook"
        if code is not None:
            read.problem(MANIFEST, code, message, _line(text, ref))
            continue
        hooks.append(value)
    return hooks


def resolve_subagents(
    read: PackageRead, text: str, entries: Sequence[dict[str, Any]], modules: Sequence[str]
) -> list[Any]:
    """The sub-agent tools ``entries`` name: an Agent (or a function of no arguments
    returning one), made a tool with the entry's name, description and limits."""
    from emelex.app._agent import Agent

    tools: list[Any] = []
    for entry in entries:
        ref = entry["ref"]
        value, code, message = _resolve(ref, modules)
        if code is None and callable(value) and not isinstance(value, Agent):
            try:
                value = value()
            except Exception as exc:
                code, message = "bad-reference", f"sub-agent {ref!r} could not be made: {exc}"
        if code is None and not isinstance(value, Agent):
            code, message = "bad-reference", f"sub-agent {ref!r} is {value!r}, not an Agent"
        if code is None:
            try:
                tools.append(
                    value.as_tool(
                        name=entry.get("name"),
                        description=entry.get("description"),
                        max_rounds=entry.get("max_rounds"),
                        timeout=entry.get("timeout"),
                    )
                )
                continue
            except InvalidSubAgent as exc:
                code, message = "bad-value", f"sub-agent {ref!r}: {exc}"
        read.problem(MANIFEST, code, message, _line(text, ref))
    return tools


__all__ = ["REFERENCE", "check_references", "resolve_hooks", "resolve_subagents"]
