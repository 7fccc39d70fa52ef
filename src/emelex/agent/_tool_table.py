"""The session's registered tools with their validators, built once at build time."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from emelex.agent._ceilings import schema_bytes
from emelex.agent._errors import InvalidToolDeclaration
from emelex.model import ToolDefinition
from emelex.tools import (
    AgentTool,
    ArgumentValidator,
    ToolCancellationPolicy,
    tool_name_problem,
    tool_schema_problem,
)

#: Default most rounds of one turn in which one tool's calls get corrections (a tool's
#: own ``max_retries`` attribute overrides it).
DEFAULT_TOOL_RETRIES = 3


@attrs.frozen
class RegisteredTool:
    tool: AgentTool
    definition: ToolDefinition
    policy: ToolCancellationPolicy
    validator: ArgumentValidator
    schema_bytes: int
    identity: tuple[tuple[str, str], ...]
    #: The schema as the tool declared it (``definition`` holds the clamped one).
    declared_parameters: dict[str, Any]
    #: Most rounds of a turn in which this tool's calls may get corrections.
    max_retries: int = DEFAULT_TOOL_RETRIES

    def validation_error(self, arguments: Mapping[str, Any]) -> str | None:
        """None when ``arguments`` satisfy the schema, else a bounded explanation."""
        return self.validator.problem(arguments)


#: Schema keywords that bound a size, clamped to the argument ceiling.
_SIZE_BOUNDS = ("maxLength", "maxItems", "maxProperties")
#: Keywords whose values are data, not subschemas: never rewritten.
_DATA_KEYWORDS = frozenset({"const", "default", "enum", "examples"})


def clamp_schema(schema: Any, limit: int) -> Any:
    """``schema`` with every ``maxLength``/``maxItems``/``maxProperties`` above ``limit``
    lowered to ``limit`` (a copy; the same object when nothing changes).

    A string of n characters, an array of n items or an object of n members encodes to
    at least n bytes of JSON, so a larger bound could only advertise values the
    argument ceiling refuses."""
    if isinstance(schema, list):
        items = [clamp_schema(item, limit) for item in schema]
        return schema if all(a is b for a, b in zip(items, schema, strict=True)) else items
    if not isinstance(schema, dict):
        return schema
    changed: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SIZE_BOUNDS and type(value) is int and value > limit:
            changed[key] = limit
        elif key not in _DATA_KEYWORDS and isinstance(value, dict | list):
            clamped = clamp_schema(value, limit)
            if clamped is not value:
                changed[key] = clamped
    return {**schema, **changed} if changed else schema


def _register(tool: AgentTool, max_argument_bytes: int | None = None) -> RegisteredTool:
    if not isinstance(tool, AgentTool):
        raise InvalidToolDeclaration(f"{tool!r} does not implement the AgentTool protocol")
    definition = tool.definition
    if not isinstance(definition, ToolDefinition):
        raise InvalidToolDeclaration(f"{tool!r}.definition is not a ToolDefinition")
    problem = tool_name_problem(definition.name)
    if problem is not None:
        raise InvalidToolDeclaration(problem)
    schema = definition.parameters
    problem = tool_schema_problem(schema)
    if problem is not None:
        raise InvalidToolDeclaration(f"tool {definition.name!r}: {problem}")
    policy = tool.cancellation_policy
    if not isinstance(policy, ToolCancellationPolicy):
        raise InvalidToolDeclaration(f"tool {definition.name!r}: invalid cancellation policy")
    max_retries = getattr(tool, "max_retries", None)
    if max_retries is None:
        max_retries = DEFAULT_TOOL_RETRIES
    elif isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
        raise InvalidToolDeclaration(
            f"tool {definition.name!r}: max_retries must be a non-negative integer or None"
        )
    identity = getattr(tool, "authority_identity", None) or {}
    declared = schema
    if max_argument_bytes is not None:
        schema = clamp_schema(schema, max_argument_bytes)
        if schema is not declared:
            definition = attrs.evolve(definition, parameters=schema)
    return RegisteredTool(
        tool=tool,
        definition=definition,
        policy=policy,
        validator=ArgumentValidator(schema),
        schema_bytes=schema_bytes(definition),
        identity=tuple(sorted((str(k), str(v)) for k, v in dict(identity).items())),
        declared_parameters=declared,
        max_retries=max_retries,
    )


class ToolTable:
    """Registered tools by name, in declaration order. With ``max_argument_bytes`` each
    schema's size bounds are clamped to it (see :func:`clamp_schema`)."""

    __slots__ = ("_by_name", "names")

    def __init__(
        self, tools: Sequence[AgentTool], *, max_argument_bytes: int | None = None
    ) -> None:
        self._by_name: dict[str, RegisteredTool] = {}
        for tool in tools:
            entry = _register(tool, max_argument_bytes)
            name = entry.definition.name
            if name in self._by_name:
                raise InvalidToolDeclaration(f"duplicate tool name {name!r}")
            self._by_name[name] = entry
        self.names: tuple[str, ...] = tuple(self._by_name)

    def get(self, name: str) -> RegisteredTool | None:
        return self._by_name.get(name)

    def __getitem__(self, name: str) -> RegisteredTool:
        return self._by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __len__(self) -> int:
        return len(self._by_name)
