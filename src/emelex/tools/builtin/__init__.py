"""Built-in tools, registered by the session builder according to BuiltinSettings.

=================  ==========================================  ===============================
tool               arguments                                   asks for approval
=================  ==========================================  ===============================
``read_file``      ``path, offset?, limit?``                   outside-root or secret path
``list_directory`` ``path``                                    outside-root or secret path
``find_files``     ``pattern, path?, include_secrets?``        outside/secret, include_secrets
``grep``           ``pattern, path?, literal?, context?,       outside/secret, include_secrets
                   case_insensitive?, glob?, include_secrets?``
``write_file``     ``path, content``                           always
``edit_file``      ``path, old, new, count?, expected_sha256?``  always
``shell``          ``command, timeout_seconds?, cwd?``         always
``web_fetch``      ``url``                                     always (opt-in tool)
``web_search``     ``query``                                   always (needs a provider)
``datetime``       ``utc_offset``                              never (opt-in tool)
=================  ==========================================  ===============================

Approvals are one-shot: an approved call's flags (``allow_outside``, ``allow_secret``,
``include_secrets``) apply to that call only and nothing is remembered.
"""

from __future__ import annotations

from typing import Any

from emelex._facade import fix_module_names
from emelex.tools._protocol import AgentTool
from emelex.tools._settings import BuiltinSettings
from emelex.tools.builtin._datetime import DateTimeTool
from emelex.tools.builtin._errors import InvalidSearchResult
from emelex.tools.builtin._files import (
    GREP_BYTES,
    READ_BYTES,
    EditFileTool,
    FindFilesTool,
    GrepTool,
    ListDirectoryTool,
    ReadFileTool,
    WriteFileTool,
    file_tools,
)
from emelex.tools.builtin._shell import ShellTool
from emelex.tools.builtin._web_fetch import WebFetchTool, address_refusal
from emelex.tools.builtin._web_search import (
    WebSearchProvider,
    WebSearchResult,
    WebSearchTool,
)
from emelex.tools.workspace import Workspace

#: The names of every built-in tool, in registration order.
BUILTIN_TOOL_NAMES = (
    "read_file",
    "list_directory",
    "find_files",
    "grep",
    "write_file",
    "edit_file",
    "shell",
    "web_fetch",
    "web_search",
    "datetime",
)


def builtin_tools(
    workspace: Workspace,
    settings: BuiltinSettings,
    web_search_provider: WebSearchProvider | Any = None,
) -> tuple[AgentTool, ...]:
    """Exactly the built-in tools ``settings`` enable, bound to ``workspace``.

    A disabled tool is not built at all, so it is neither registered nor advertised.
    ``web_search`` needs ``settings.web_search`` and a provider; a provider without the
    setting (or the reverse) is a configuration error. Private network addresses are
    reachable by ``web_fetch`` only when ``settings`` has a true
    ``web_allow_private_addresses`` attribute.
    """
    tools: list[AgentTool] = []
    if settings.file_tools:
        tools.extend(file_tools(workspace))
    if settings.shell:
        tools.append(
            ShellTool(
                workspace,
                timeout_seconds=settings.shell_timeout_seconds,
                output_bytes=settings.shell_output_bytes,
            )
        )
    if settings.web_fetch:
        tools.append(
            WebFetchTool(
                max_body_bytes=settings.web_response_bytes,
                allow_private=bool(getattr(settings, "web_allow_private_addresses", False)),
            )
        )
    if settings.web_search != (web_search_provider is not None):
        raise ValueError(
            "web_search is enabled without a WebSearchProvider"
            if settings.web_search
            else "a WebSearchProvider was supplied but web_search is disabled"
        )
    if web_search_provider is not None:
        tools.append(WebSearchTool(web_search_provider))
    if settings.datetime:
        tools.append(DateTimeTool())
    return tuple(tools)


__all__ = [
    "GREP_BYTES",
    "READ_BYTES",
    "BUILTIN_TOOL_NAMES",
    "DateTimeTool",
    "EditFileTool",
    "FindFilesTool",
    "GrepTool",
    "InvalidSearchResult",
    "ListDirectoryTool",
    "ReadFileTool",
    "ShellTool",
    "WebFetchTool",
    "WebSearchProvider",
    "WebSearchResult",
    "WebSearchTool",
    "WriteFileTool",
    "address_refusal",
    "builtin_tools",
]

fix_module_names(__name__, globals())
