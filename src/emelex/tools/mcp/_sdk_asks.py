"""The SDK callbacks for a server that asks back (imported with the SDK).

Each callback runs the configured handler inside a cancel scope from the connection's
:class:`AskScopes` (deadline ``ask_timeout``), so a cancelled call or a closing
connection ends it; the server then gets ``cancel`` or an error, never silence.
"""

from __future__ import annotations

import logging
from typing import Any

import mcp.types as types

from emelex.tools.mcp._asks import (
    AskScopes,
    ElicitAccept,
    ElicitationHandler,
    ElicitationRequest,
    ElicitDecline,
    SamplingHandler,
    SamplingMessage,
    SamplingRequest,
    SamplingResult,
    checked_answer,
)
from emelex.tools.mcp._config import McpServer
from emelex.tools.mcp._errors import McpAskRefused

_log = logging.getLogger("emelex.tools.mcp")


def elicitation_callback(server: McpServer, handler: ElicitationHandler, asks: AskScopes) -> Any:
    async def callback(context: Any, params: types.ElicitRequestParams) -> Any:
        if not isinstance(params, types.ElicitRequestFormParams):
            # URL mode sends a person elsewhere: not something this client offers.
            return types.ErrorData(
                code=types.INVALID_PARAMS, message="URL elicitation is not supported"
            )
        schema = params.requestedSchema
        request = ElicitationRequest(server.name, params.message, dict(schema))
        scope = asks.open(server.ask_timeout)
        answer: object = None
        try:
            with scope:
                answer = await handler.elicit(request)
        except Exception as exc:
            _log.warning("MCP server %r: elicitation handler raised %r", server.name, exc)
            answer = None
        finally:
            asks.close(scope)
        checked = checked_answer(request, answer)
        if isinstance(checked, ElicitAccept):
            return types.ElicitResult(action="accept", content=dict(checked.content))
        if isinstance(checked, ElicitDecline):
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="cancel")

    return callback


def sampling_callback(server: McpServer, handler: SamplingHandler, asks: AskScopes) -> Any:
    async def callback(context: Any, params: types.CreateMessageRequestParams) -> Any:
        messages: list[SamplingMessage] = []
        for message in params.messages:
            texts = [b.text for b in message.content_as_list if isinstance(b, types.TextContent)]
            if len(texts) != len(message.content_as_list):
                return _error("only text sampling messages are supported")
            messages.append(SamplingMessage(message.role, "".join(texts)))
        if params.tools:
            return _error("sampling with tools is not supported")
        request = SamplingRequest(
            server.name,
            tuple(messages),
            params.systemPrompt,
            params.maxTokens,
            params.temperature,
            tuple(params.stopSequences or ()),
        )
        scope = asks.open(server.ask_timeout)
        result: SamplingResult | None = None
        try:
            with scope:
                result = await handler.sample(request)
        except McpAskRefused as exc:
            return _error(f"refused: {exc}")
        except Exception as exc:
            _log.warning("MCP server %r: sampling handler raised %r", server.name, exc)
            return _error(f"the client's sampling failed: {type(exc).__name__}")
        finally:
            asks.close(scope)
        if result is None or not isinstance(result, SamplingResult):
            return _error("the sampling request was cancelled or timed out")
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=result.text),
            model=result.model,
            stopReason=result.stop_reason,
        )

    return callback


def _error(message: str) -> types.ErrorData:
    return types.ErrorData(code=types.INVALID_REQUEST, message=message)


def callbacks(server: McpServer, asks: AskScopes) -> dict[str, Any]:
    """The ``ClientSession`` keyword arguments for ``server``'s handlers (none set: the
    SDK's defaults decline)."""
    found: dict[str, Any] = {}
    if server.elicitation is not None:
        found["elicitation_callback"] = elicitation_callback(server, server.elicitation, asks)
    if server.sampling is not None:
        found["sampling_callback"] = sampling_callback(server, server.sampling, asks)
    return found


__all__ = ["callbacks"]
