"""Which built-in tools a session gets, and the workspace policy around them.

The one place that decides a session's built-ins: the harness and the agent's built-in
capabilities name them, the workspace policy guards them, and every one is bound to the
session's single open :class:`~emelex.tools.workspace.Workspace`. The settings they
were made for go into the session's authority snapshot.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import attrs

from emelex.app._agent import Agent
from emelex.app._capabilities import BuiltinCapability
from emelex.app._errors import ShellNotAllowed
from emelex.app._harness import Harness, workspace_section
from emelex.app._policy import GuardedFileTool, GuardedShellTool
from emelex.tools import AgentTool, BuiltinSettings
from emelex.tools.workspace import Workspace

#: Limits a capability leaves unset: those of the standalone AgentSessionBuilder.
_DEFAULTS = BuiltinSettings()


@attrs.frozen
class Builtins:
    """A session's built-in tools, ready to register, and what they were made for."""

    settings: BuiltinSettings
    #: (tool, the source named in a name-collision error), in declaration order.
    tools: tuple[tuple[AgentTool, str], ...]
    #: Prompt sections that describe them (the workspace section).
    prompt: tuple[str, ...]


def builtin_names(agent: Agent, harness: Harness) -> frozenset[str]:
    """The built-ins the harness and the agent's built-in capabilities ask for."""
    wanted = {c.id for c in agent.capabilities if isinstance(c, BuiltinCapability)}
    if harness.files:
        wanted.add("files")
    if harness.shell:
        wanted.add("shell")
    if harness.datetime:
        wanted.add("datetime")
    if harness.skills and agent.skills:
        wanted.add("skills")
    return frozenset(wanted)


def make_builtins(
    agent: Agent, harness: Harness, names: frozenset[str], workspace: Workspace
) -> Builtins:
    """The guarded built-in tools ``names`` select (``skills`` excepted: not a tool of
    the workspace), bound to ``workspace``. Raises :class:`ShellNotAllowed` when the
    shell is asked for under a read-only policy."""
    from emelex.tools.builtin import (
        GREP_BYTES,
        READ_BYTES,
        DateTimeTool,
        EditFileTool,
        FindFilesTool,
        GrepTool,
        ListDirectoryTool,
        ReadFileTool,
        ShellTool,
        WebFetchTool,
        WriteFileTool,
    )

    policy = agent.workspace_policy
    cap = None if harness.context_budget is None else harness.context_budget.tool_result_bytes
    options = {
        c.id: dict(c.options) for c in agent.capabilities if isinstance(c, BuiltinCapability)
    }
    if "shell" in names and not policy.write:
        raise ShellNotAllowed(
            f"the {harness.name} harness (or a capability) asks for the shell but the "
            "workspace policy is read-only; select WorkspacePolicy.read_write()"
        )
    tools: list[tuple[AgentTool, str]] = []
    prompt: list[str] = []
    settings = BuiltinSettings(
        file_tools="files" in names,
        shell="shell" in names,
        web_fetch="web_fetch" in names,
        web_search=False,
        datetime="datetime" in names,
    )
    if "files" in names:
        readonly = frozenset(f.parts for f in agent.files if f.readonly)
        # Under a context budget the latest round is never shortened, so one
        # result must leave room for the rest of the request.
        read_bytes = READ_BYTES if cap is None else min(READ_BYTES, cap)
        grep_bytes = GREP_BYTES if cap is None else min(GREP_BYTES, cap)
        kinds: list[Callable[[Workspace], AgentTool]] = [
            functools.partial(ReadFileTool, max_bytes=read_bytes),
            ListDirectoryTool,
            FindFilesTool,
            functools.partial(GrepTool, max_bytes=grep_bytes),
        ]
        if policy.write:
            kinds.extend((WriteFileTool, EditFileTool))
        for kind in kinds:
            tool = GuardedFileTool(kind(workspace), workspace, readonly)
            tools.append((tool, "the file tools"))
        prompt.append(workspace_section(policy, shell="shell" in names))
    if "shell" in names:
        config: dict[str, Any] = options.get("shell", {})
        output_bytes = config.get("output_bytes", _DEFAULTS.shell_output_bytes)
        if cap is not None:
            output_bytes = min(output_bytes, cap)
        timeout = config.get("timeout_seconds", _DEFAULTS.shell_timeout_seconds)
        settings = attrs.evolve(
            settings, shell_timeout_seconds=timeout, shell_output_bytes=output_bytes
        )
        shell = ShellTool(workspace, timeout_seconds=timeout, output_bytes=output_bytes)
        guarded = GuardedShellTool(shell, recursive_delete=policy.recursive_delete)
        tools.append((guarded, "the shell"))
    if "web_fetch" in names:
        config = options["web_fetch"]
        response_bytes = config.get("response_bytes", _DEFAULTS.web_response_bytes)
        settings = attrs.evolve(settings, web_response_bytes=response_bytes)
        tools.append((WebFetchTool(max_body_bytes=response_bytes), "the web_fetch capability"))
    if "datetime" in names:
        tools.append((DateTimeTool(), "the datetime tool"))
    return Builtins(settings, tuple(tools), tuple(prompt))


__all__ = ["Builtins", "builtin_names", "make_builtins"]
