"""Capabilities: built-ins by id, code-defined packages and references, one entry point.

``AgentBuilder.capability(...)`` accepts:

* a built-in id (``"files"``, ``"shell"``, ``"web_fetch"``, ``"datetime"``,
  ``"skills"``) with keyword options (see :data:`BUILTIN_OPTIONS`);
* a code-defined package: any object with an ``id``, ``tools`` (AgentTools) and an
  optional ``prompt`` (text added to the system prompt), e.g. :class:`CapabilityPackage`;
* a :class:`CapabilityRef`, resolved by the engine's resolver when a session starts.
"""

from __future__ import annotations

import math
import re
import types
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import attrs

from emelex.app._errors import InvalidCapability, InvalidCapabilityConfig
from emelex.tools import AgentTool

#: Ids of built-in, package and reference capabilities (a reference may add
#: ``/``-separated segments and an ``@version``).
CAPABILITY_ID = re.compile(r"[a-z][a-z0-9_-]{0,63}")
REFERENCE_ID = re.compile(
    r"[a-z0-9][a-z0-9_.-]{0,63}(?:/[a-z0-9][a-z0-9_.-]{0,63}){0,4}(?:@[A-Za-z0-9_.+-]{1,64})?"
)

#: Tool names each built-in capability registers (files: the last two only with a
#: writable workspace policy).
BUILTIN_TOOLS: Mapping[str, tuple[str, ...]] = types.MappingProxyType(
    {
        "files": (
            "read_file",
            "list_directory",
            "find_files",
            "grep",
            "write_file",
            "edit_file",
        ),
        "shell": ("shell",),
        "web_fetch": ("web_fetch",),
        "datetime": ("datetime",),
        "skills": ("load_skill",),
    }
)


def _positive_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a number of seconds")
    if not (math.isfinite(value) and 0 < value <= 20 * 60):
        raise ValueError("must be within (0, 1200] seconds")
    return float(value)


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("must be a positive integer")
    return value


#: The options each built-in capability accepts, with their checks.
BUILTIN_OPTIONS: Mapping[str, Mapping[str, Callable[[Any], Any]]] = types.MappingProxyType(
    {
        "files": {},
        "shell": {"timeout_seconds": _positive_seconds, "output_bytes": _positive_int},
        "web_fetch": {"response_bytes": _positive_int},
        "datetime": {},
        "skills": {},
    }
)


def tools_tuple(value: Iterable[AgentTool]) -> tuple[AgentTool, ...]:
    return tuple(value)


def _frozen(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value))


@attrs.frozen
class BuiltinCapability:
    """A built-in capability and its checked options."""

    id: str
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen)

    @property
    def tool_names(self) -> tuple[str, ...]:
        return BUILTIN_TOOLS[self.id]


@attrs.frozen
class CapabilityPackage:
    """Tools and prompt text contributed together under one id."""

    id: str
    tools: tuple[AgentTool, ...] = attrs.field(default=(), converter=tools_tuple)
    prompt: str | None = None
    description: str = ""


@attrs.frozen
class CapabilityRef:
    """A capability named by reference (``"acme/crm@2"``), resolved by the engine's
    ``capability_resolver`` when a session starts; ``config`` is passed along as is."""

    id: str
    config: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen)


Capability: TypeAlias = BuiltinCapability | CapabilityPackage | CapabilityRef

CapabilityResolver = Callable[[CapabilityRef], Awaitable[Any]]
"""Resolves a reference to a package (anything with ``id``, ``tools``, ``prompt``)."""


def as_package(value: Any, where: str) -> CapabilityPackage:
    """Check a code-defined package and freeze it as a :class:`CapabilityPackage`."""
    if isinstance(value, CapabilityPackage):
        package = value
    else:
        if not hasattr(value, "id") or not hasattr(value, "tools"):
            raise InvalidCapability(
                f"{where}: {value!r} is not a capability (give a built-in id, a package "
                "with id/tools/prompt, or a CapabilityRef)"
            )
        try:
            tools = tuple(value.tools)
        except TypeError as exc:
            raise InvalidCapability(f"{where}: the package's tools are not iterable") from exc
        package = CapabilityPackage(
            id=value.id,
            tools=tools,
            prompt=getattr(value, "prompt", None),
            description=getattr(value, "description", "") or "",
        )
    if not isinstance(package.id, str) or not CAPABILITY_ID.fullmatch(package.id):
        raise InvalidCapability(
            f"{where}: capability id {package.id!r} must be 1-64 lowercase letters, digits, "
            "_ or -, starting with a letter"
        )
    if package.id in BUILTIN_TOOLS:
        raise InvalidCapability(f"{where}: {package.id!r} is the id of a built-in capability")
    if package.prompt is not None and not isinstance(package.prompt, str):
        raise InvalidCapability(f"{where}: a package prompt must be text")
    for tool in package.tools:
        if not isinstance(tool, AgentTool):
            raise InvalidCapability(f"{where}: {tool!r} does not implement AgentTool")
    return package


def to_capability(spec: Any, options: Mapping[str, Any]) -> Capability:
    """Turn one ``capability(...)`` argument into a checked capability."""
    if isinstance(spec, str):
        if not CAPABILITY_ID.fullmatch(spec):
            raise InvalidCapability(
                f"capability id {spec!r} must be 1-64 lowercase letters, digits, _ or -"
            )
        if spec not in BUILTIN_OPTIONS:
            known = ", ".join(sorted(BUILTIN_OPTIONS))
            raise InvalidCapability(
                f"unknown built-in capability {spec!r} (built-ins: {known}; use a package "
                "or a CapabilityRef for others)"
            )
        allowed = BUILTIN_OPTIONS[spec]
        checked: dict[str, Any] = {}
        for key, value in options.items():
            if key not in allowed:
                raise InvalidCapabilityConfig(
                    f"capability {spec!r} has no option {key!r}"
                    + (f" (options: {', '.join(sorted(allowed))})" if allowed else "")
                )
            try:
                checked[key] = allowed[key](value)
            except ValueError as exc:
                raise InvalidCapabilityConfig(
                    f"capability {spec!r} option {key}={value!r}: {exc}"
                ) from exc
        return BuiltinCapability(spec, checked)
    if options:
        raise InvalidCapabilityConfig(
            "options are for built-in capabilities; configure packages and references "
            "through the object itself"
        )
    if isinstance(spec, BuiltinCapability):
        return to_capability(spec.id, spec.options)
    if isinstance(spec, CapabilityRef):
        if not isinstance(spec.id, str) or not REFERENCE_ID.fullmatch(spec.id):
            raise InvalidCapability(f"invalid capability reference {spec.id!r}")
        return spec
    return as_package(spec, "capability")


def capability_id(capability: Capability) -> str:
    return capability.id


__all__ = [
    "BUILTIN_OPTIONS",
    "BUILTIN_TOOLS",
    "BuiltinCapability",
    "Capability",
    "CapabilityPackage",
    "CapabilityRef",
    "CapabilityResolver",
    "as_package",
    "capability_id",
    "to_capability",
]
