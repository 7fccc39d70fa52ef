"""Built-in tool enablement and limits (part of a session's authority)."""

from __future__ import annotations

import attrs


@attrs.frozen
class BuiltinSettings:
    """Which built-in tools a session registers, and their configured limits.

    File tools and the shell are on by default; network and clock tools are opt-in
    (``web_search`` turns on when the application supplies a search provider).
    """

    file_tools: bool = True
    shell: bool = True
    web_fetch: bool = False
    web_search: bool = False
    datetime: bool = False
    web_response_bytes: int = 256 * 1024
    shell_timeout_seconds: float = 120.0
    shell_output_bytes: int = 64 * 1024
    web_allow_private_addresses: bool = False
