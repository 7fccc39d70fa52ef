"""Placeholder declarations for tools a conversation calls but the session lacks (pure).

A history the harness committed may call a tool the session does not have: the model
proposed a name nobody declared (it got an "unknown tool" result), or the tool was
removed from the agent between two runs. Those calls stay in history as they were
answered. A request showing such a call without any declaration may not render (chat
templates and provider APIs expect every called name to be declared), so the turn core
declares each such name with a *retired* placeholder: a description that says it is not
available and an empty argument schema.

A placeholder only makes the request renderable. It is never in the tool table, so it is
not executable (a new call to it gets the same unknown-tool result as any undeclared
name), and it never enters the authority snapshot or ``available_tools``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from emelex.agent._ceilings import ResourceCeilings, schema_bytes
from emelex.agent._errors import CeilingExceeded
from emelex.agent._tool_table import ToolTable
from emelex.model import ToolDefinition
from emelex.tools import tool_name_problem

#: What the model reads about a retired name (short: it counts against max_schema_bytes).
RETIRED_DESCRIPTION: Final = (
    "Not available in this session: declared only so that earlier calls to it in this "
    "conversation can be shown. Calling it runs nothing."
)


def retired_definition(name: str) -> ToolDefinition:
    """The placeholder declaration of ``name`` (no arguments, never executable)."""
    return ToolDefinition(name, RETIRED_DESCRIPTION, {"type": "object", "properties": {}})


def retired_names(called: Iterable[str], table: ToolTable) -> tuple[str, ...]:
    """The names in ``called`` that ``table`` lacks and a declaration can carry, sorted
    (so the same conversation always gets the same declarations).

    A name outside the tool-name rule gets no placeholder: providers refuse a
    declaration with such a name, which would fail every request instead of one."""
    return tuple(
        sorted(
            name for name in set(called) if name not in table and tool_name_problem(name) is None
        )
    )


def with_retired(
    tools: tuple[ToolDefinition, ...],
    schemas: dict[str, int],
    called: Iterable[str],
    table: ToolTable,
    ceilings: ResourceCeilings,
) -> tuple[tuple[ToolDefinition, ...], dict[str, int]]:
    """``tools`` (whose sizes are ``schemas``) followed by a placeholder for every retired
    name in ``called``, and the sizes of all of them. Raises :class:`CeilingExceeded`
    when the declarations together pass ``max_schema_bytes``."""
    extra = tuple(retired_definition(name) for name in retired_names(called, table))
    if not extra:
        return tools, schemas
    sizes = {**schemas, **{tool.name: schema_bytes(tool) for tool in extra}}
    total = sum(sizes.values())
    if total > ceilings.max_schema_bytes:
        raise CeilingExceeded("max_schema_bytes", ceilings.max_schema_bytes, total)
    return tools + extra, sizes


__all__ = ["RETIRED_DESCRIPTION", "retired_definition", "retired_names", "with_retired"]
