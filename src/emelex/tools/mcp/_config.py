"""MCP server configurations: frozen, validated when built, secrets kept out of ``repr``.

Everything here is trusted host configuration. Model output must never choose a URL,
a header, a command, its arguments or its environment.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import urlsplit

import attrs

from emelex.tools.mcp._asks import ElicitationHandler, SamplingHandler
from emelex.tools.mcp._errors import InvalidMcpConfig

#: Server names: what tool names are prefixed with (``<server>__<tool>``).
_SERVER_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")
#: RFC 9110 header field names (a token).
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Header values: visible ASCII, space and tab (no CR, LF, NUL or non-ASCII).
_HEADER_VALUE: Final = re.compile(r"[\t\x20-\x7e]*")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Headers the MCP transport or HTTP itself owns; a host may not set them.
_RESERVED_HEADERS: Final = frozenset(
    {
        "accept",
        "connection",
        "content-length",
        "content-type",
        "host",
        "last-event-id",
        "mcp-protocol-version",
        "mcp-session-id",
        "te",
        "transfer-encoding",
        "upgrade",
    }
)
MAX_URL_CHARS: Final = 2048
REDACTED: Final = "<redacted>"

#: Defaults (seconds, bytes, counts); each is a field of :class:`McpServer`.
DEFAULT_CONNECT_TIMEOUT: Final = 30.0
DEFAULT_CALL_TIMEOUT: Final = 300.0
DEFAULT_SHUTDOWN_TIMEOUT: Final = 5.0
DEFAULT_LIVENESS_TIMEOUT: Final = 30.0
DEFAULT_MAX_RESULT_BYTES: Final = 256 * 1024
DEFAULT_MAX_TOOLS: Final = 128
DEFAULT_MAILBOX: Final = 32
DEFAULT_MAX_CONCURRENT_CALLS: Final = 8
#: Longest a server's question (elicitation) or generation (sampling) may take.
DEFAULT_ASK_TIMEOUT: Final = 300.0

StderrMode: TypeAlias = Literal["inherit", "discard"]


def _refuse(message: str) -> InvalidMcpConfig:
    return InvalidMcpConfig(message)


def _no_nul(what: str, value: object) -> str:
    if not isinstance(value, str):
        raise _refuse(f"{what} must be a string, got {type(value).__name__}")
    if "\x00" in value:
        raise _refuse(f"{what} must not contain NUL characters")
    return value


def _to_headers(
    value: Mapping[str, str] | Iterable[tuple[str, str]],
) -> tuple[tuple[str, str], ...]:
    items = list(value.items()) if isinstance(value, Mapping) else list(value)
    seen: set[str] = set()
    headers: list[tuple[str, str]] = []
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise _refuse("headers must be a mapping of name to value")
        name, text = item
        if not isinstance(name, str) or not _HEADER_NAME.fullmatch(name):
            raise _refuse(f"invalid HTTP header name {name!r}")
        lowered = name.lower()
        if lowered in _RESERVED_HEADERS:
            raise _refuse(f"the header {name!r} is set by the MCP transport, not by the host")
        if lowered in seen:
            raise _refuse(f"the header {name!r} is given twice")
        seen.add(lowered)
        # Never echo the value: it is usually a credential.
        if not isinstance(text, str) or not _HEADER_VALUE.fullmatch(text):
            raise _refuse(
                f"the value of header {name!r} must be visible ASCII text without line breaks"
            )
        headers.append((name, text))
    return tuple(headers)


def _headers_repr(headers: tuple[tuple[str, str], ...]) -> str:
    return "{" + ", ".join(f"{name!r}: {REDACTED!r}" for name, _ in headers) + "}"


def _check_url(_instance: Any, _attribute: Any, url: Any) -> None:
    _no_nul("the URL", url)
    if len(url) > MAX_URL_CHARS:
        raise _refuse(f"the URL is longer than {MAX_URL_CHARS} characters")
    if any(char.isspace() or not char.isprintable() for char in url):
        raise _refuse("the URL must not contain whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError as exc:
        raise _refuse(f"malformed URL: {exc}") from exc
    if parts.scheme not in ("http", "https"):
        raise _refuse(f"the URL must use http or https, not {parts.scheme or 'no scheme'!r}")
    if not parts.hostname:
        raise _refuse("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise _refuse("the URL must not carry credentials: pass them as headers")
    if parts.fragment:
        raise _refuse("the URL must not have a fragment")


def _url_repr(url: str) -> str:
    # A query string may carry an API key: show that there is one, not what it is.
    parts = urlsplit(url)
    shown = parts._replace(query=REDACTED if parts.query else "").geturl()
    return repr(shown)


@attrs.frozen
class HttpTransport:
    """A remote server over Streamable HTTP. ``headers`` go with every request; their
    values (and the URL's query string) are redacted from ``repr`` and never logged."""

    url: str = attrs.field(validator=_check_url, repr=_url_repr)
    headers: tuple[tuple[str, str], ...] = attrs.field(
        default=(), converter=_to_headers, repr=_headers_repr
    )

    @property
    def kind(self) -> Literal["http"]:
        return "http"

    def describe(self) -> str:
        """The endpoint for humans and authority records (no header values, no query)."""
        return _url_repr(self.url)[1:-1]


def _to_command(value: str | os.PathLike[str]) -> str:
    command = _no_nul("the command", os.fspath(value))
    if not command:
        raise _refuse("the command must not be empty")
    if not os.path.isabs(command) and "/" in command:
        raise _refuse(
            f"the command {command!r} must be an absolute path or a bare name found on PATH"
        )
    return command


def _to_args(value: Sequence[str | os.PathLike[str]]) -> tuple[str, ...]:
    if isinstance(value, str | bytes):
        raise _refuse("args must be a sequence of strings, not one string")
    return tuple(_no_nul("an argument", os.fspath(arg)) for arg in value)


def _to_env(
    value: Mapping[str, str] | Iterable[tuple[str, str]] | None,
) -> tuple[tuple[str, str], ...] | None:
    if value is None:
        return None
    items = list(value.items()) if isinstance(value, Mapping) else list(value)
    env: dict[str, str] = {}
    for item in items:
        if not isinstance(item, tuple) or len(item) != 2:
            raise _refuse("env must be a mapping of name to value")
        name, text = item
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):
            raise _refuse(f"invalid environment variable name {name!r}")
        env[name] = _no_nul(f"the value of {name}", text)
    return tuple(sorted(env.items()))


def _env_repr(env: tuple[tuple[str, str], ...] | None) -> str:
    if env is None:
        return "None"
    return "{" + ", ".join(f"{name!r}: {REDACTED!r}" for name, _ in env) + "}"


def _to_cwd(value: str | os.PathLike[str] | None) -> str | None:
    if value is None:
        return None
    cwd = _no_nul("cwd", os.fspath(value))
    if not os.path.isabs(cwd):
        raise _refuse(f"cwd must be an absolute path, got {cwd!r}")
    return cwd


def _check_stderr(_instance: Any, _attribute: Any, value: Any) -> None:
    if value not in ("inherit", "discard"):
        raise _refuse(f"stderr must be 'inherit' or 'discard', got {value!r}")


@attrs.frozen
class StdioTransport:
    """A local server process speaking MCP over its stdin and stdout.

    ``command`` is an absolute path or a bare name looked up on ``PATH`` when the
    connection opens. The process gets a minimal inherited environment (``HOME``,
    ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``) plus ``env``; env values are
    redacted from ``repr``. ``stderr`` is inherited from the host or discarded.
    """

    command: str = attrs.field(converter=_to_command)
    args: tuple[str, ...] = attrs.field(default=(), converter=_to_args)
    env: tuple[tuple[str, str], ...] | None = attrs.field(
        default=None, converter=_to_env, repr=_env_repr
    )
    cwd: str | None = attrs.field(default=None, converter=_to_cwd)
    stderr: StderrMode = attrs.field(default="inherit", validator=_check_stderr)

    @property
    def kind(self) -> Literal["stdio"]:
        return "stdio"

    def describe(self) -> str:
        return " ".join([self.command, *self.args])


Transport: TypeAlias = HttpTransport | StdioTransport


def _check_name(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, str) or not _SERVER_NAME.fullmatch(value):
        raise _refuse(
            f"an MCP server name must be 1-32 letters, digits, '_' or '-' "
            f"starting with a letter or digit, got {value!r}"
        )


def _check_transport(_instance: Any, _attribute: Any, value: Any) -> None:
    if not isinstance(value, HttpTransport | StdioTransport):
        raise _refuse(f"transport must be HttpTransport or StdioTransport, got {value!r}")


def _positive_seconds(optional: bool) -> Any:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if value is None and optional:
            return
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            raise _refuse(f"{attribute.name} must be a positive number of seconds, got {value!r}")

    return check


def _int_between(low: int, high: int) -> Any:
    def check(_instance: Any, attribute: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise _refuse(f"{attribute.name} must be an integer in {low}..{high}, got {value!r}")

    return check


def _to_allowed(value: Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        raise _refuse("allow_tools must be a collection of tool names, not one string")
    names = frozenset(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise _refuse(f"allow_tools holds an invalid tool name {name!r}")
    return names


def _allowed_repr(value: frozenset[str] | None) -> str:
    return "None" if value is None else repr(sorted(value))


def _check_bool(_instance: Any, attribute: Any, value: Any) -> None:
    if not isinstance(value, bool):
        raise _refuse(f"{attribute.name} must be True or False, got {value!r}")


def _optional_handler(protocol: type) -> Any:
    def check(_instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
        if value is not None and not isinstance(value, protocol):
            raise InvalidMcpConfig(f"{attribute.name} must be a {protocol.__name__} or None")

    return check


@attrs.frozen
class McpServer:
    """One MCP server the host trusts enough to connect to.

    Build it with :meth:`http` or :meth:`stdio`. Fields:

    * ``name``: 1-32 letters, digits, ``_`` or ``-``; tool names become
      ``<name>__<tool>`` unless ``prefix_tools`` is False.
    * ``trusted``: when False (the default) every call of its tools asks for approval.
    * ``allow_tools``: if given, only these (server-side) tool names are offered.
    * ``connect_timeout``: bound on starting, the handshake and tool discovery.
    * ``call_timeout``: bound on one tool call (None: no bound); on expiry the server
      is sent a cancellation and the call ends with an error result.
    * ``shutdown_timeout``: bound on closing (after it a stdio process is killed).
    * ``liveness_timeout``: HTTP only; while a call runs the server is pinged, and a
      server that answers no ping for this long fails the connection (its running calls
      end with ``McpServerClosed``) instead of holding them until ``call_timeout``
      (None: no pings).
    * ``max_result_bytes``: largest tool result handed to the model; longer results
      are cut with a marker.
    * ``max_tools``: most tools taken from the server; the rest are dropped with a warning.
    * ``mailbox`` and ``max_concurrent_calls``: the connection actor's bounded request
      queue and how many calls it runs at once.
    * ``elicitation`` and ``sampling``: handlers for a server that asks back (see
      :mod:`emelex.tools.mcp._asks`); None (the default) declines. ``ask_timeout``
      bounds each (an unanswered question is answered ``cancel``).
    """

    name: str = attrs.field(validator=_check_name)
    transport: Transport = attrs.field(validator=_check_transport)
    trusted: bool = attrs.field(default=False, kw_only=True, validator=_check_bool)
    prefix_tools: bool = attrs.field(default=True, kw_only=True, validator=_check_bool)
    allow_tools: frozenset[str] | None = attrs.field(
        default=None, kw_only=True, converter=_to_allowed, repr=_allowed_repr
    )
    connect_timeout: float = attrs.field(
        default=DEFAULT_CONNECT_TIMEOUT, kw_only=True, validator=_positive_seconds(False)
    )
    call_timeout: float | None = attrs.field(
        default=DEFAULT_CALL_TIMEOUT, kw_only=True, validator=_positive_seconds(True)
    )
    shutdown_timeout: float = attrs.field(
        default=DEFAULT_SHUTDOWN_TIMEOUT, kw_only=True, validator=_positive_seconds(False)
    )
    liveness_timeout: float | None = attrs.field(
        default=DEFAULT_LIVENESS_TIMEOUT, kw_only=True, validator=_positive_seconds(True)
    )
    max_result_bytes: int = attrs.field(
        default=DEFAULT_MAX_RESULT_BYTES, kw_only=True, validator=_int_between(1024, 64 << 20)
    )
    max_tools: int = attrs.field(
        default=DEFAULT_MAX_TOOLS, kw_only=True, validator=_int_between(1, 4096)
    )
    mailbox: int = attrs.field(
        default=DEFAULT_MAILBOX, kw_only=True, validator=_int_between(1, 4096)
    )
    max_concurrent_calls: int = attrs.field(
        default=DEFAULT_MAX_CONCURRENT_CALLS, kw_only=True, validator=_int_between(1, 256)
    )
    elicitation: ElicitationHandler | None = attrs.field(
        default=None, kw_only=True, validator=_optional_handler(ElicitationHandler)
    )
    sampling: SamplingHandler | None = attrs.field(
        default=None, kw_only=True, validator=_optional_handler(SamplingHandler)
    )
    ask_timeout: float = attrs.field(
        default=DEFAULT_ASK_TIMEOUT, kw_only=True, validator=_positive_seconds(False)
    )

    @classmethod
    def http(
        cls,
        name: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        **options: Any,
    ) -> McpServer:
        """A remote Streamable HTTP server at ``url`` (http or https, no credentials in
        the URL). ``headers`` (for example ``Authorization``) are sent with every request
        and redacted from ``repr``. ``options`` are the other fields of :class:`McpServer`.
        """
        return cls(name, HttpTransport(url, headers or {}), **options)

    @classmethod
    def stdio(
        cls,
        name: str,
        command: str | os.PathLike[str],
        args: Sequence[str | os.PathLike[str]] = (),
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        *,
        stderr: StderrMode = "inherit",
        **options: Any,
    ) -> McpServer:
        """A local server process (needs the ``mcp-stdio`` extra). The command, its
        arguments, environment and working directory are trusted host configuration."""
        return cls(name, StdioTransport(command, args, env, cwd, stderr), **options)

    def tool_name(self, remote: str) -> str:
        """The name a server tool is offered to the model under."""
        return f"{self.name}__{remote}" if self.prefix_tools else remote

    def authority_identity(self) -> dict[str, str]:
        """What identifies this server in a session's authority snapshot: never a header
        or environment value, only names and a digest of the non-secret configuration."""
        transport = self.transport
        if isinstance(transport, HttpTransport):
            secret_names = [name.lower() for name, _ in transport.headers]
        else:
            secret_names = [name for name, _ in transport.env or ()]
        public = repr((transport.kind, transport.describe(), sorted(secret_names)))
        if isinstance(transport, StdioTransport):
            public += repr((transport.cwd, transport.stderr))
        return {
            "mcp.server": self.name,
            "mcp.transport": transport.kind,
            "mcp.endpoint": transport.describe(),
            "mcp.trusted": "yes" if self.trusted else "no",
            "mcp.config": hashlib.sha256(public.encode("utf-8", "surrogateescape")).hexdigest(),
        }
