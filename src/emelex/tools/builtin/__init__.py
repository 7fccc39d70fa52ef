"""Built-in tools, registered by the session builder according to BuiltinSettings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from emelex.tools._protocol import AgentTool
from emelex.tools._settings import BuiltinSettings
from emelex.tools.workspace import Workspace


def builtin_tools(
    workspace: Workspace, settings: BuiltinSettings, web_search_provider: Any = None
) -> Sequence[AgentTool]:
    """The built-in tools ``settings`` enable, bound to ``workspace``.

    The built-in tool implementations have not landed yet (issue 4); until they do, no
    built-in tool is registered or advertised whatever the settings say, and the
    settings are recorded in the authority snapshot only.
    """
    return ()
