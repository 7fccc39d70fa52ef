"""MCP tools as :class:`AgentTool`: discovery checks, approval sentences, invocation."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from emelex._text import shorten
from emelex.model import ToolDefinition
from emelex.tools._definition import TOOL_NAME_RULE, tool_name_problem, tool_schema_problem
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.mcp._config import McpServer
from emelex.tools.mcp._errors import McpError

if TYPE_CHECKING:
    from emelex.tools.mcp._connection import McpConnection

#: Longest tool description kept; longer ones are cut (with a warning).
MAX_DESCRIPTION_CHARS: Final = 4_000
#: Largest argument schema accepted (compact JSON); larger tools are dropped.
MAX_SCHEMA_BYTES: Final = 64 * 1024
#: Longest rendering of the arguments inside an approval sentence.
MAX_APPROVAL_ARGUMENT_CHARS: Final = 2_000


@attrs.frozen
class RemoteTool:
    """A tool as the server listed it (only the fields emelex uses)."""

    name: str
    description: str | None
    input_schema: object


def _quote(text: str) -> str:
    # ASCII-only JSON: control, format and bidi characters are escaped, so server or model
    # text cannot disguise an approval sentence.
    return json.dumps(text, ensure_ascii=True)


def accept_tools(
    server: McpServer, listed: Sequence[RemoteTool]
) -> tuple[list[tuple[RemoteTool, ToolDefinition]], list[str]]:
    """Check what a server listed; returns the accepted tools and a warning per drop."""
    accepted: list[tuple[RemoteTool, ToolDefinition]] = []
    warnings: list[str] = []
    seen: set[str] = set()
    allowed = server.allow_tools
    for remote in listed:
        if allowed is not None and remote.name not in allowed:
            continue
        shown = _quote(remote.name)[:100]
        if len(accepted) >= server.max_tools:
            warnings.append(f"tool {shown} dropped: more than {server.max_tools} tools")
            continue
        name = server.tool_name(remote.name)
        if tool_name_problem(name) is not None:
            warnings.append(f"tool {shown} dropped: {_quote(name)[:100]} is not {TOOL_NAME_RULE}")
            continue
        if name in seen:
            warnings.append(f"tool {shown} dropped: the server listed it twice")
            continue
        problem = schema_problem(remote.input_schema)
        if problem is not None:
            warnings.append(f"tool {shown} dropped: {problem}")
            continue
        description = remote.description or ""
        if len(description) > MAX_DESCRIPTION_CHARS:
            warnings.append(f"tool {shown}: description cut to {MAX_DESCRIPTION_CHARS} characters")
            description = shorten(description, MAX_DESCRIPTION_CHARS)
        schema = dict(remote.input_schema)  # type: ignore[call-overload]  # checked above
        seen.add(name)
        accepted.append((remote, ToolDefinition(name, description, schema)))
    return accepted, warnings


def schema_problem(schema: object) -> str | None:
    """Why ``schema`` cannot be an argument schema, or None."""
    if not isinstance(schema, Mapping):
        return "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        return "its input schema does not describe an object"
    # The size first: a huge schema is refused before the (costlier) schema check.
    try:
        size = len(json.dumps(schema, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError) as exc:
        return f"its input schema is not JSON: {exc}"
    if size > MAX_SCHEMA_BYTES:
        return f"its input schema is larger than {MAX_SCHEMA_BYTES} bytes"
    problem = tool_schema_problem(dict(schema))
    if problem is not None:
        return f"its input schema is invalid: {problem.removeprefix('invalid JSON Schema: ')[:200]}"
    return None


class McpTool:
    """One tool of a connected MCP server, offered to the model.

    ``definition.name`` is ``<server>__<tool>`` (or the bare tool name when the server
    config says ``prefix_tools=False``). Calls go through the connection actor.

    Cancellation policy: :attr:`ToolCancellationPolicy.INTERRUPTIBLE`. Dropping
    :meth:`invoke` at any checkpoint leaves nothing running in the host: the connection
    actor cancels its side of the request, tells the server
    (``notifications/cancelled``) and stays usable. What the server already did cannot
    be known or undone, which the harness records as "effects unknown".

    Approval: unless the server is ``trusted``, every call asks, naming the tool, the
    server and the exact arguments.
    """

    __slots__ = ("_connection", "_definition", "_identity", "remote_name")

    def __init__(
        self, connection: McpConnection, remote_name: str, definition: ToolDefinition
    ) -> None:
        self._connection = connection
        self.remote_name = remote_name
        self._definition = definition
        self._identity = {
            **connection.server.authority_identity(),
            "mcp.tool": remote_name,
        }

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    @property
    def authority_identity(self) -> Mapping[str, str]:
        return self._identity

    @property
    def server(self) -> McpServer:
        return self._connection.server

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        server = self._connection.server
        if server.trusted:
            return None
        rendered = json.dumps(dict(arguments), ensure_ascii=True, sort_keys=True, default=repr)
        if len(rendered) > MAX_APPROVAL_ARGUMENT_CHARS:
            rest = len(rendered) - MAX_APPROVAL_ARGUMENT_CHARS
            rendered = rendered[:MAX_APPROVAL_ARGUMENT_CHARS] + f"… ({rest} more characters)"
        return (
            f"call MCP tool {_quote(self.remote_name)} on server {_quote(server.name)} "
            f"({server.transport.kind} {_quote(server.transport.describe())}) "
            f"with arguments {rendered}"
        )

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        """Forward ``tools/call``; connection problems become error results."""
        try:
            return await self._connection._call_tool(
                self.remote_name, invocation.arguments, invocation.cancellation
            )
        except McpError as exc:
            return ToolOutput.error(str(exc))

    def __repr__(self) -> str:
        return f"<McpTool {self._definition.name!r} of server {self._connection.server.name!r}>"
