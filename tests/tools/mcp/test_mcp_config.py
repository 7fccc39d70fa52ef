"""McpServer configurations: validation, redaction, identity. No SDK session needed."""

from __future__ import annotations

import os
import pickle
import re
import sys
from typing import Any

import pytest

from emelex import EmelexError
from emelex.tools.mcp import (
    HttpTransport,
    InvalidMcpConfig,
    McpError,
    McpServer,
    StdioTransport,
)

SECRET = "Bearer s3cr3t-token"


def test_http_config_redacts_header_values_and_url_query() -> None:
    server = McpServer.http(
        "catalog",
        "https://example.com/mcp?api_key=k3y",
        headers={"Authorization": SECRET, "X-Tenant": "acme"},
    )
    assert isinstance(server.transport, HttpTransport)
    assert server.transport.headers == (("Authorization", SECRET), ("X-Tenant", "acme"))
    for text in (repr(server), str(server), repr(server.transport)):
        assert "s3cr3t" not in text
        assert "acme" not in text
        assert "k3y" not in text
        assert "'Authorization': '<redacted>'" in text
    assert server.transport.describe() == "https://example.com/mcp?<redacted>"
    identity = server.authority_identity()
    assert not any("s3cr3t" in value or "k3y" in value for value in identity.values())
    assert identity["mcp.server"] == "catalog"
    assert identity["mcp.trusted"] == "no"


def test_config_is_frozen_hashable_and_compared_by_value() -> None:
    one = McpServer.http("a", "http://127.0.0.1:1/mcp", headers={"X": "1"})
    two = McpServer.http("a", "http://127.0.0.1:1/mcp", headers={"X": "1"})
    assert one == two
    assert hash(one) == hash(two)
    with pytest.raises(AttributeError):
        one.name = "b"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(one)) == one


def test_identity_changes_with_configuration_but_not_with_secret_values() -> None:
    base = McpServer.http("a", "https://h/mcp", headers={"Authorization": "one"})
    rotated = McpServer.http("a", "https://h/mcp", headers={"Authorization": "two"})
    assert base.authority_identity() == rotated.authority_identity()
    other = McpServer.http("a", "https://h/other", headers={"Authorization": "one"})
    assert base.authority_identity() != other.authority_identity()
    trusted = McpServer.http("a", "https://h/mcp", headers={"Authorization": "one"}, trusted=True)
    assert base.authority_identity()["mcp.trusted"] != trusted.authority_identity()["mcp.trusted"]


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/mcp", "http or https"),
        ("example.com/mcp", "http or https"),
        ("https:///mcp", "no host"),
        ("https://user:pw@example.com/mcp", "credentials"),
        ("https://example.com/mcp#frag", "fragment"),
        ("https://example.com/m cp", "whitespace"),
        ("https://example.com:99999/mcp", "malformed"),
        ("https://example.com/" + "a" * 3000, "longer than"),
    ],
)
def test_http_url_is_validated(url: str, problem: str) -> None:
    with pytest.raises(InvalidMcpConfig, match=problem):
        McpServer.http("s", url)


@pytest.mark.parametrize(
    ("headers", "problem"),
    [
        ({"Bad Name": "x"}, "invalid HTTP header name"),
        ({"X-Token": "a\r\nInjected: 1"}, "visible ASCII"),
        ({"X-Token": "caf\u00e9"}, "visible ASCII"),
        ({"Mcp-Session-Id": "x"}, "set by the MCP transport"),
        ({"Content-Type": "x"}, "set by the MCP transport"),
    ],
)
def test_headers_are_validated_without_echoing_values(
    headers: dict[str, str], problem: str
) -> None:
    with pytest.raises(InvalidMcpConfig, match=problem) as caught:
        McpServer.http("s", "https://example.com/mcp", headers=headers)
    assert "Injected" not in str(caught.value)
    assert "caf" not in str(caught.value)


def test_duplicate_headers_differing_in_case_are_refused() -> None:
    with pytest.raises(InvalidMcpConfig, match="given twice"):
        HttpTransport("https://h/mcp", [("X-A", "1"), ("x-a", "2")])


@pytest.mark.parametrize("name", ["", "-lead", "has space", "a" * 33, "dots.no", "ünï"])
def test_server_names_are_validated(name: str) -> None:
    with pytest.raises(InvalidMcpConfig, match="server name"):
        McpServer.http(name, "https://example.com/mcp")


def test_stdio_config_validates_command_args_env_and_cwd(tmp_path: os.PathLike[str]) -> None:
    server = McpServer.stdio(
        "local", sys.executable, ["-m", "srv"], env={"API_KEY": "hidden-value"}, cwd=tmp_path
    )
    transport = server.transport
    assert isinstance(transport, StdioTransport)
    assert transport.args == ("-m", "srv")
    assert transport.cwd == os.fspath(tmp_path)
    assert "hidden-value" not in repr(server)
    assert "'API_KEY': '<redacted>'" in repr(server)
    assert "hidden-value" not in str(server.authority_identity())
    assert McpServer.stdio("bare", "python3").transport.describe() == "python3"
    with pytest.raises(InvalidMcpConfig, match="absolute path or a bare name"):
        McpServer.stdio("s", "bin/server")
    with pytest.raises(InvalidMcpConfig, match="must not be empty"):
        McpServer.stdio("s", "")
    with pytest.raises(InvalidMcpConfig, match="NUL"):
        McpServer.stdio("s", sys.executable, ["a\x00b"])
    with pytest.raises(InvalidMcpConfig, match="not one string"):
        McpServer.stdio("s", sys.executable, "-v")
    with pytest.raises(InvalidMcpConfig, match="environment variable name"):
        McpServer.stdio("s", sys.executable, env={"BAD-NAME": "x"})
    with pytest.raises(InvalidMcpConfig, match="cwd must be an absolute path"):
        McpServer.stdio("s", sys.executable, cwd="relative/dir")
    with pytest.raises(InvalidMcpConfig, match="stderr"):
        McpServer.stdio("s", sys.executable, stderr="file")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("connect_timeout", 0),
        ("connect_timeout", float("inf")),
        ("call_timeout", -1),
        ("shutdown_timeout", True),
        ("max_result_bytes", 10),
        ("max_tools", 0),
        ("mailbox", 0),
        ("max_concurrent_calls", 1000),
        ("trusted", "yes"),
        ("allow_tools", "echo"),
    ],
)
def test_options_are_validated(option: str, value: Any) -> None:
    with pytest.raises(InvalidMcpConfig, match=option):
        McpServer.http("s", "https://example.com/mcp", **{option: value})


def test_errors_belong_to_the_emelex_tree() -> None:
    error = InvalidMcpConfig("x")
    assert isinstance(error, McpError)
    assert isinstance(error, EmelexError)


def test_tool_names_are_prefixed_unless_disabled() -> None:
    server = McpServer.http("srv", "https://h/mcp")
    assert server.tool_name("echo") == "srv__echo"
    bare = McpServer.http("srv", "https://h/mcp", prefix_tools=False)
    assert bare.tool_name("echo") == "echo"
    call_timeout_none = McpServer.http("srv", "https://h/mcp", call_timeout=None)
    assert call_timeout_none.call_timeout is None


async def test_connecting_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import trio

    from emelex.tools.mcp import McpUnavailable, open_mcp_connection

    monkeypatch.setitem(sys.modules, "emelex.tools.mcp._sdk", None)
    for server, extra in (
        (McpServer.http("h", "https://example.com/mcp"), "emelex[mcp]"),
        (McpServer.stdio("s", sys.executable), "emelex[mcp-stdio]"),
    ):
        with trio.fail_after(5), pytest.raises(McpUnavailable, match=re.escape(extra)) as caught:
            async with open_mcp_connection(server):
                pytest.fail("connected without the SDK")
        assert isinstance(caught.value.__cause__, ImportError)
