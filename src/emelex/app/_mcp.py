"""An engine integration that connects each session to its agent's MCP servers."""

from __future__ import annotations

from emelex._ids import new_id
from emelex.agent import ApprovalContext, ApprovalPolicy, Approve, Deny, DenyAll
from emelex.app._errors import AppError
from emelex.app._integration import Contribution, IntegrationRequest
from emelex.model import (
    AgentModel,
    Client,
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    ToolCall,
    ToolDefinition,
)
from emelex.runtime import Supervisor
from emelex.tools import AgentTool
from emelex.tools.mcp import (
    McpAskRefused,
    McpConnection,
    McpServer,
    McpStdioDisabled,
    SamplingRequest,
    SamplingResult,
    StdioTransport,
    start_mcp_connection,
)

#: The default approver of :class:`ModelSampling`: every sampling request is denied.
DENY_SAMPLING = DenyAll()


def check_stdio_allowed(servers: tuple[object, ...], allow_stdio: bool) -> None:
    """Refuse the first stdio server unless the host enabled them (the ``mcp-stdio`` gate).

    Checked before any connection opens, so a refused agent starts no process at all.
    """
    if allow_stdio:
        return
    for server in servers:
        if isinstance(server, McpServer) and isinstance(server.transport, StdioTransport):
            raise McpStdioDisabled(
                "stdio MCP servers run local processes and are off by default: install "
                "emelex[mcp-stdio] and pass Engine(allow_stdio_servers=True) "
                "(or McpIntegration(allow_stdio=True))",
                server=server.name,
            )


class McpIntegration:
    """Opens one connection actor per MCP server of the agent when a session starts and
    closes them when it closes; the servers' tools join the session.

    The connections live in the current supervisor's nursery (they outlive the call that
    starts the session), so use it inside :func:`emelex.open_supervisor`. A server that
    cannot be reached fails the session start (connections opened before it are closed).
    Stdio servers (local processes, the ``mcp-stdio`` extra) are refused with
    :class:`~emelex.tools.mcp.McpStdioDisabled` unless ``allow_stdio=True``.
    """

    def __init__(self, *, allow_stdio: bool = False) -> None:
        if not isinstance(allow_stdio, bool):
            raise TypeError("allow_stdio must be True or False")
        self.allow_stdio = allow_stdio

    async def open(self, request: IntegrationRequest) -> Contribution:
        servers = request.agent.mcp_servers
        for server in servers:
            if not isinstance(server, McpServer):
                raise AppError(
                    f"MCP server {getattr(server, 'name', server)!r} is not an McpServer"
                )
        check_stdio_allowed(servers, self.allow_stdio)
        actors = Supervisor.current().actors
        connections: list[McpConnection] = []
        try:
            for server in servers:
                connections.append(await start_mcp_connection(actors, server))
        except BaseException:
            for connection in reversed(connections):
                await connection.aclose()
            raise
        tools: list[AgentTool] = [tool for c in connections for tool in c.tools()]
        warnings = [warning for c in connections for warning in c.warnings]

        async def close() -> None:
            for connection in reversed(connections):
                await connection.aclose()

        return Contribution(tools=tools, handles={"mcp_servers"}, close=close, warnings=warnings)


#: Most tokens a sampling request generates unless the application says otherwise.
DEFAULT_SAMPLING_TOKENS = 512
#: Most messages and characters a server may send in one sampling request.
MAX_SAMPLING_MESSAGES = 64
MAX_SAMPLING_CHARS = 64_000


class ModelSampling:
    """Runs an MCP server's sampling requests on ``client``, a model the application
    names (a server never reaches a model implicitly).

    Each request is bounded (at most ``max_tokens`` generated, whatever the server
    asked; at most :data:`MAX_SAMPLING_MESSAGES` messages and
    :data:`MAX_SAMPLING_CHARS` characters, refused beyond) and asked of ``approver``
    first, as a call of the pseudo-tool ``mcp_sampling`` (its arguments name the
    server, the message count and the token bound). The default approver denies: pass
    one that decides, or ``approver=None`` to sample without asking. A denial or a
    refusal reaches the server as an error (``McpAskRefused``)."""

    def __init__(
        self,
        client: Client | AgentModel,
        *,
        approver: ApprovalPolicy | None = DENY_SAMPLING,
        max_tokens: int = DEFAULT_SAMPLING_TOKENS,
    ) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        self.client = client if isinstance(client, Client) else Client(client)
        self.approver = approver
        self.max_tokens = max_tokens

    async def sample(self, request: SamplingRequest) -> SamplingResult:
        """Checkpoints; raises McpAskRefused (bounds, denial) or what the model raises."""
        chars = sum(len(m.text) for m in request.messages) + len(request.system_prompt or "")
        if len(request.messages) > MAX_SAMPLING_MESSAGES or chars > MAX_SAMPLING_CHARS:
            raise McpAskRefused(
                f"at most {MAX_SAMPLING_MESSAGES} messages and {MAX_SAMPLING_CHARS:,} "
                "characters per sampling request",
                server=request.server,
            )
        tokens = min(request.max_tokens, self.max_tokens)
        if self.approver is not None:
            await self._approve(request, tokens)
        messages = [Message("system", request.system_prompt)] if request.system_prompt else []
        messages += [Message(m.role, m.text) for m in request.messages]
        options = GenerationOptions(
            max_tokens=tokens, temperature=request.temperature, stop=request.stop
        )
        async with self.client.generate(GenerationRequest(messages, options=options)) as stream:
            async for event in stream:
                if isinstance(event, Completed):
                    reason = "maxTokens" if event.response.finish_reason == "length" else "endTurn"
                    name = type(self.client.model).__name__
                    return SamplingResult(event.response.text, name, reason)
        raise McpAskRefused("the model ended without a response", server=request.server)

    async def _approve(self, request: SamplingRequest, tokens: int) -> None:
        assert self.approver is not None
        arguments = {
            "server": request.server,
            "messages": len(request.messages),
            "max_tokens": tokens,
        }
        context = ApprovalContext(
            "",
            "",
            ToolCall(new_id(), "mcp_sampling", arguments),
            SAMPLING_TOOL,
            f"MCP server {request.server!r} asks the model to generate up to {tokens} tokens",
        )
        decision = await self.approver.decide(context)
        if not isinstance(decision, Approve):
            reason = decision.reason if isinstance(decision, Deny) else "not approved"
            raise McpAskRefused(f"sampling denied: {reason}", server=request.server)


SAMPLING_TOOL = ToolDefinition(
    "mcp_sampling",
    "An MCP server asks the application's model to generate text.",
    {"type": "object", "properties": {}, "additionalProperties": True},
)
