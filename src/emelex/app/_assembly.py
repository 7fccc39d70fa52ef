"""What a session is assembled from before its AgentSession is built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import attrs

from emelex.app._agent import check_tool
from emelex.app._errors import NameCollision
from emelex.tools import AgentTool, BuiltinSettings


@attrs.define
class Assembly:
    """Everything a session is built from, collected before the AgentSession."""

    tools: list[AgentTool] = attrs.Factory(list)
    #: The built-in tools, ahead of ``tools`` (the session's declaration order).
    builtins: list[AgentTool] = attrs.Factory(list)
    settings: BuiltinSettings = attrs.Factory(
        lambda: BuiltinSettings(file_tools=False, shell=False)
    )
    owners: dict[str, str] = attrs.Factory(dict)
    prompt: list[str] = attrs.Factory(list)
    closers: list[Callable[[], Awaitable[None]]] = attrs.Factory(list)
    handled: set[str] = attrs.Factory(set)

    def add(self, tool: AgentTool, source: str, *, builtin: bool = False) -> None:
        name = check_tool(tool, source)
        if name in self.owners:
            raise NameCollision(f"tool {name!r} is provided by {self.owners[name]} and {source}")
        self.owners[name] = source
        (self.builtins if builtin else self.tools).append(tool)

    @property
    def all_tools(self) -> list[AgentTool]:
        return [*self.builtins, *self.tools]


__all__ = ["Assembly"]
