"""Pure checks on what a hook hands back (no Trio, no I/O): a rewrite enters the turn
only as a value that would have passed had the model proposed it."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

from emelex.agent._arguments import json_problem
from emelex.agent._ceilings import (
    ResourceCeilings,
    argument_bytes,
    first_excess,
    measure_messages,
)
from emelex.agent._hooks import HookFailed
from emelex.agent._tool_table import RegisteredTool
from emelex.model import GenerationRequest
from emelex.tools import ToolOutput


def checked_request(
    hook: str, new: object, schemas: Mapping[str, int], ceilings: ResourceCeilings
) -> GenerationRequest:
    """``new`` when it is a request within ``ceilings`` offering only tools named in
    ``schemas`` (what the turn advertises, with their sizes); HookFailed otherwise."""
    if not isinstance(new, GenerationRequest):
        raise HookFailed(f"hook {hook!r} replaced the request with {type(new).__name__}")
    unknown = sorted(t.name for t in new.tools if t.name not in schemas)
    if unknown:
        raise HookFailed(
            f"hook {hook!r} offered tools this turn does not advertise: {', '.join(unknown)}"
        )
    size = measure_messages(new.messages)
    excess = first_excess(size, sum(schemas[t.name] for t in new.tools), ceilings)
    if excess is not None:
        name, maximum, actual = excess
        raise HookFailed(
            f"hook {hook!r} replaced the request with one over a ceiling: {name} is "
            f"{actual:,}, at most {maximum:,}"
        )
    return new


def checked_arguments(
    hook: str, tool: RegisteredTool, arguments: object, limit: int
) -> dict[str, object]:
    """``arguments`` when they are JSON, at most ``limit`` bytes and valid for ``tool``'s
    schema; HookFailed (naming the problem) otherwise."""
    name = tool.definition.name
    if not isinstance(arguments, dict):
        raise HookFailed(f"hook {hook!r} rewrote {name!r} arguments into a non-object")
    problem = json_problem(arguments, max_values=max(limit // 2, 1))
    if problem is not None:
        raise HookFailed(f"hook {hook!r} rewrote {name!r} arguments into non-JSON: {problem}")
    size = argument_bytes(arguments)
    if size > limit:
        raise HookFailed(
            f"hook {hook!r} rewrote {name!r} arguments to {size:,} bytes; the round has "
            f"{max(limit, 0):,} left under max_tool_argument_bytes"
        )
    problem = tool.validation_error(arguments)
    if problem is not None:
        raise HookFailed(
            f"hook {hook!r} rewrote {name!r} arguments that fail its schema: {problem}"
        )
    return arguments


def result_digest(output: ToolOutput) -> str:
    """What a hook record keeps of a replaced result: its size and a SHA-256 of its
    content's text, enough to tell results apart, never the content."""
    text = output.text
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return f"sha256:{digest} ({len(text):,} chars{', error' if output.is_error else ''})"


def checked_output(hook: str, new: object) -> ToolOutput:
    if not isinstance(new, ToolOutput):
        raise HookFailed(f"hook {hook!r} replaced a tool result with {type(new).__name__}")
    return new


__all__ = ["checked_arguments", "checked_output", "checked_request", "result_digest"]
