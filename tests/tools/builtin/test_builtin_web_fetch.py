"""web_fetch against real servers on loopback (plain HTTP and TLS), and through sessions.

The server is a few lines of Trio: it records every connection and request, and serves
canned routes (a redirect, an oversized body, a compression bomb, a body that stalls).
The tool is built with ``allow_private=True`` to reach it, except where the test is that
loopback is refused.
"""

from __future__ import annotations

import gzip
import json
import ssl
import subprocess
import zlib
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import emelex
from emelex.agent import AgentCancellation, AgentSession, DenyAll, TurnCancelled
from emelex.agent._turn_rules import INTERRUPTED
from emelex.model import ToolCall
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel
from emelex.tools import ToolInvocation, ToolOutput
from emelex.tools.builtin import WebFetchTool, address_refusal
from emelex.tools.builtin._errors import FetchRefused
from emelex.tools.builtin._web_fetch import BodyDecoder, parse_url

Runner = Callable[..., Awaitable[Any]]


@attrs.define
class Seen:
    method: str
    target: str
    headers: dict[str, str]


def _response(status: str, headers: dict[str, str], body: bytes = b"") -> bytes:
    lines = [f"HTTP/1.1 {status}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


class Loopback:
    """A tiny HTTP/1.1 server: one request per connection, canned routes."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[Seen] = []
        self.port = 0
        self.scheme = "http"
        self.host = "127.0.0.1"
        self.stalled = trio.Event()

    def url(self, path: str) -> str:
        return f"{self.scheme}://{self.host}:{self.port}{path}"

    async def handle(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        try:
            await self._serve(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError, OSError):
            pass  # the client hung up (cut bodies, refused certificates)
        finally:
            await trio.aclose_forcefully(stream)

    async def _serve(self, stream: trio.abc.Stream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            data += chunk
        head = data.split(b"\r\n\r\n", 1)[0].decode("latin-1")
        line, *rest = head.split("\r\n")
        method, target, _version = line.split(" ", 2)
        headers = {}
        for item in rest:
            name, _, value = item.partition(":")
            headers[name.strip().lower()] = value.strip()
        self.requests.append(Seen(method, target, headers))
        path = target.split("?", 1)[0]
        route = getattr(self, "route_" + path.strip("/").replace("-", "_"), None)
        if route is None:
            await stream.send_all(_response("404 Not Found", {"Content-Length": "4"}, b"nope"))
            return
        await route(stream, headers)

    async def route_ok(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        body = b"hello from loopback\n"
        await stream.send_all(
            _response(
                "200 OK",
                {
                    "Content-Type": "text/plain; charset=utf-8",
                    "Content-Length": str(len(body)),
                    "Set-Cookie": "sid=abc; Path=/",
                },
                body,
            )
        )

    async def route_echo(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        body = json.dumps(headers, sort_keys=True).encode()
        await stream.send_all(
            _response(
                "200 OK",
                {"Content-Type": "application/json", "Content-Length": str(len(body))},
                body,
            )
        )

    async def route_redirect(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        await stream.send_all(
            _response("302 Found", {"Location": "/ok?from=redirect", "Content-Length": "0"})
        )

    async def route_big(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        body = b"a" * 1_000_000
        await stream.send_all(
            _response("200 OK", {"Content-Type": "text/plain", "Content-Length": "1000000"}, body)
        )

    async def route_bomb(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        body = gzip.compress(b"b" * 20_000_000)  # about 20 KB on the wire
        await stream.send_all(
            _response(
                "200 OK",
                {
                    "Content-Type": "text/plain",
                    "Content-Encoding": "gzip",
                    "Content-Length": str(len(body)),
                },
                body,
            )
        )

    async def route_deflate(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)  # raw deflate, as some send
        body = compressor.compress(b"deflated text\n") + compressor.flush()
        await stream.send_all(
            _response(
                "200 OK",
                {"Content-Encoding": "deflate", "Content-Length": str(len(body))},
                body,
            )
        )

    async def route_brotli(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        await stream.send_all(
            _response("200 OK", {"Content-Encoding": "br", "Content-Length": "3"}, b"xyz")
        )

    async def route_latin1(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        await stream.send_all(
            _response(
                "200 OK",
                {"Content-Type": "text/plain; charset=iso-8859-1", "Content-Length": "4"},
                b"caf\xe9",
            )
        )

    async def route_image(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        body = b"\x89PNG\r\n\x1a\n" + bytes(range(256))
        await stream.send_all(
            _response(
                "200 OK", {"Content-Type": "image/png", "Content-Length": str(len(body))}, body
            )
        )

    async def route_slow(self, stream: trio.abc.Stream, headers: dict[str, str]) -> None:
        await stream.send_all(
            _response("200 OK", {"Content-Type": "text/plain", "Content-Length": "1000"}, b"x" * 10)
        )
        self.stalled.set()
        await trio.sleep_forever()


@pytest.fixture
async def server(nursery: trio.Nursery) -> Loopback:
    loopback = Loopback()
    listeners = await nursery.start(partial(trio.serve_tcp, loopback.handle, 0, host="127.0.0.1"))
    loopback.port = listeners[0].socket.getsockname()[1]
    return loopback


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for ``localhost`` (made with the openssl CLI)."""
    directory = tmp_path_factory.mktemp("tls")
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


@pytest.fixture
async def tls_server(nursery: trio.Nursery, certificate: tuple[Path, Path]) -> Loopback:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    loopback = Loopback()
    loopback.scheme = "https"
    loopback.host = "localhost"
    listeners = await nursery.start(
        partial(trio.serve_ssl_over_tcp, loopback.handle, 0, context, host="127.0.0.1")
    )
    loopback.port = listeners[0].transport_listener.socket.getsockname()[1]
    return loopback


async def fetch(tool: WebFetchTool, url: str, *, approved: bool = True) -> ToolOutput:
    invocation = ToolInvocation(
        ToolCall("call-1", "web_fetch", {"url": url}),
        AgentCancellation(),
        "turn",
        "session",
        approved=approved,
    )
    with trio.fail_after(20):
        return await tool.invoke(invocation)


class Resolver:
    """A resolver that answers from a table and counts lookups."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.lookups: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.lookups.append(host)
        await trio.lowlevel.checkpoint()
        return self.table[host]


# -- responses ------------------------------------------------------------------------------


async def test_get_returns_status_headers_and_body(server: Loopback) -> None:
    output = await fetch(WebFetchTool(allow_private=True), server.url("/ok"))
    assert output.is_error is False
    assert output.text == (
        "HTTP 200 OK\n"
        f'url: "{server.url("/ok")}"\n'
        "content-type: text/plain; charset=utf-8\n"
        "[body: 20 bytes]\n"
        "hello from loopback\n"
    )


async def test_request_identity_no_cookies_no_proxy(
    server: Loopback, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # would fail if it were used
    monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
    tool = WebFetchTool(allow_private=True)
    await fetch(tool, server.url("/ok"))  # the server sets a cookie here
    output = await fetch(tool, server.url("/echo"))
    body = json.loads(output.text.split("\n", 4)[4])
    assert body["user-agent"] == f"emelex/{emelex.__version__}"
    assert body["host"] == f"127.0.0.1:{server.port}"
    assert body["accept-encoding"] == "gzip, deflate"
    assert "cookie" not in body
    assert [seen.target for seen in server.requests] == ["/ok", "/echo"]


async def test_redirect_is_returned_not_followed(server: Loopback) -> None:
    output = await fetch(WebFetchTool(allow_private=True), server.url("/redirect"))
    assert output.is_error is False
    assert output.text == (
        f'HTTP 302 Found: redirect to "{server.url("/ok?from=redirect")}"\n'
        "[not followed: to follow it, call web_fetch with that URL (a new call needs a new "
        "approval)]"
    )
    assert [seen.target for seen in server.requests] == ["/redirect"]


async def test_oversized_body_is_cut_while_streaming(server: Loopback) -> None:
    output = await fetch(WebFetchTool(allow_private=True, max_body_bytes=1000), server.url("/big"))
    lines = output.text.split("\n")
    assert lines[3] == "[body cut: only the first 1000 bytes were read (the limit is 1000 bytes)]"
    assert lines[4] == "a" * 1000


async def test_compression_bomb_is_cut_after_decoding(server: Loopback) -> None:
    output = await fetch(WebFetchTool(allow_private=True, max_body_bytes=5000), server.url("/bomb"))
    lines = output.text.split("\n")
    assert lines[3] == "[body cut: only the first 5000 bytes were read (the limit is 5000 bytes)]"
    assert lines[4] == "b" * 5000


def test_decoder_output_never_passes_the_cap() -> None:
    decoder = BodyDecoder("gzip")
    data = gzip.compress(b"z" * 10_000_000)
    produced = decoder.feed(data, 100)
    assert len(produced) == 101  # one byte beyond the room says "there is more"
    with pytest.raises(FetchRefused, match="unsupported Content-Encoding"):
        BodyDecoder("gzip, br")
    assert BodyDecoder("identity").feed(b"abc", 1) == b"ab"


async def test_encodings_charsets_and_binary(server: Loopback) -> None:
    tool = WebFetchTool(allow_private=True)
    deflated = await fetch(tool, server.url("/deflate"))
    assert deflated.text.endswith("[body: 14 bytes]\ndeflated text\n")
    latin = await fetch(tool, server.url("/latin1"))
    assert latin.text.endswith("\ncafé")
    image = await fetch(tool, server.url("/image"))
    assert image.text.endswith("[body: 264 bytes]\n[binary body not shown]")
    brotli = await fetch(tool, server.url("/brotli"))
    assert brotli.is_error and "unsupported Content-Encoding 'br'" in brotli.text
    missing = await fetch(tool, server.url("/missing"))
    assert missing.is_error is False and missing.text.startswith("HTTP 404 Not Found\n")


async def test_slow_body_times_out_as_an_error(server: Loopback) -> None:
    tool = WebFetchTool(allow_private=True, timeout_seconds=0.5)
    output = await fetch(tool, server.url("/slow"))
    assert output.is_error
    assert output.text.startswith(f'web_fetch: "{server.url("/slow")}" ')
    assert "(HTTP 200, 10 body bytes received)" in output.text


# -- refusals -------------------------------------------------------------------------------


async def test_credentials_in_url_are_refused(server: Loopback) -> None:
    tool = WebFetchTool(allow_private=True)
    url = f"http://user:secret@127.0.0.1:{server.port}/ok"
    assert tool.approval_reason({"url": url}) is None  # nothing to approve: it never runs
    output = await fetch(tool, url)
    assert output.is_error
    assert output.text == "web_fetch: URLs with credentials (user:password@) are refused"
    assert server.connections == 0


async def test_private_addresses_refused_unless_allowed(server: Loopback) -> None:
    tool = WebFetchTool()
    for url in (
        server.url("/ok"),
        f"http://localhost:{server.port}/ok",
        f"http://[::ffff:127.0.0.1]:{server.port}/ok",
        f"http://0.0.0.0:{server.port}/ok",
    ):
        output = await fetch(tool, url)
        assert output.is_error, url
        assert "(private addresses are not allowed)" in output.text
    assert server.connections == 0
    assert (await fetch(WebFetchTool(allow_private=True), server.url("/ok"))).is_error is False


async def test_metadata_endpoints_refused_even_when_private_allowed() -> None:
    tool = WebFetchTool(allow_private=True)
    for url in ("http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/"):
        output = await fetch(tool, url)
        assert output.text.endswith("a cloud metadata endpoint"), output.text


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("127.0.0.1", "a loopback address"),
        ("::1", "a loopback address"),
        ("10.1.2.3", "a private address"),
        ("192.168.0.1", "a private address"),
        ("172.16.5.4", "a private address"),
        ("fd12::1", "a private address"),
        ("169.254.1.1", "a link-local address"),
        ("fe80::1", "a link-local address"),
        ("224.0.0.1", "a multicast address"),
        ("ff02::1", "a multicast address"),
        ("0.0.0.0", "the unspecified address"),
        ("240.0.0.1", "a reserved address"),
        ("100.64.0.1", "not a globally routable address"),
        ("::ffff:10.0.0.1", "a private address"),
        ("64:ff9b::7f00:1", "a loopback address"),
        ("2002:7f00:1::", "a loopback address"),
        ("169.254.169.254", "a cloud metadata endpoint"),
        ("fd00:ec2::254", "a cloud metadata endpoint"),
        ("::ffff:169.254.169.254", "a cloud metadata endpoint"),
        ("93.184.215.14", None),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", None),
    ],
)
def test_address_classification(address: str, reason: str | None) -> None:
    assert address_refusal(address, allow_private=False) == reason
    allowed = address_refusal(address, allow_private=True)
    assert allowed == (reason if reason == "a cloud metadata endpoint" else None)


async def test_resolved_once_and_pinned(server: Loopback) -> None:
    resolver = Resolver({"pinned.test": ["127.0.0.1"]})
    tool = WebFetchTool(allow_private=True, resolver=resolver)
    output = await fetch(tool, f"http://pinned.test:{server.port}/echo")
    body = json.loads(output.text.split("\n", 4)[4])
    assert body["host"] == f"pinned.test:{server.port}"  # the name, sent to the checked IP
    assert resolver.lookups == ["pinned.test"]


async def test_any_private_answer_refuses_the_name(server: Loopback) -> None:
    resolver = Resolver({"rebind.test": ["93.184.215.14", "127.0.0.1"]})
    output = await fetch(WebFetchTool(resolver=resolver), f"http://rebind.test:{server.port}/")
    assert output.text == (
        "web_fetch: refused: 'rebind.test' resolves to 127.0.0.1, a loopback address "
        "(private addresses are not allowed)"
    )
    assert server.connections == 0


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "only http and https URLs can be fetched, not 'file'"),
        ("ftp://example.com/", "only http and https URLs can be fetched, not 'ftp'"),
        ("http://user@example.com/", "URLs with credentials (user:password@) are refused"),
        ("http://exa mple.com/", "the URL contains whitespace or control characters"),
        ("http:///path", "the URL has no host"),
    ],
)
def test_url_refusals(url: str, message: str) -> None:
    with pytest.raises(FetchRefused) as caught:
        parse_url(url)
    assert str(caught.value) == message


# -- TLS --------------------------------------------------------------------------------------


async def test_tls_verifies_the_host_name_over_the_pinned_address(
    tls_server: Loopback, certificate: tuple[Path, Path]
) -> None:
    trusting = ssl.create_default_context(cafile=str(certificate[0]))
    resolver = Resolver({"localhost": ["127.0.0.1"], "wrong.test": ["127.0.0.1"]})
    tool = WebFetchTool(allow_private=True, resolver=resolver, ssl_context=trusting)
    output = await fetch(tool, tls_server.url("/ok"))
    assert output.text.startswith("HTTP 200 OK\n"), output.text

    wrong = await fetch(tool, f"https://wrong.test:{tls_server.port}/ok")
    assert wrong.is_error and "certificate" in wrong.text.lower(), wrong.text

    default = WebFetchTool(allow_private=True, resolver=resolver)  # the public CA bundle
    untrusted = await fetch(default, tls_server.url("/ok"))
    assert untrusted.is_error and "CERTIFICATE_VERIFY_FAILED" in untrusted.text
    assert len(tls_server.requests) == 1  # only the verified connection sent a request


# -- through sessions -------------------------------------------------------------------------


async def test_session_web_fetch_is_opt_in_and_guarded(run_calls: Runner, server: Loopback) -> None:
    default = await run_calls([Call("web_fetch", {"url": server.url("/ok")})], ApproveAll())
    assert "web_fetch" not in default.advertised
    assert default.executed == [False]

    def opt_in(builder: Any) -> Any:
        return builder.include_web_fetch(True).web_response_bytes(4096)

    denied = await run_calls(
        [Call("web_fetch", {"url": server.url("/ok")})], DenyAll(), configure=opt_in
    )
    assert "web_fetch" in denied.advertised
    assert denied.reasons == [
        f'fetch "{server.url("/ok")}" with one HTTP GET request (redirects are not '
        "followed; at most 4096 bytes of the body are read)"
    ]
    assert denied.executed == [False]
    approvals = ApproveAll()
    approved = await run_calls(
        [Call("web_fetch", {"url": server.url("/ok")})], approvals, configure=opt_in
    )
    assert len(approvals.asked) == 1
    assert approved.tool_messages == [
        "web_fetch: refused: '127.0.0.1' resolves to 127.0.0.1, a loopback address "
        "(private addresses are not allowed)"
    ]
    assert server.connections == 0


async def test_session_fetch_asks_per_call(run_calls: Runner, server: Loopback) -> None:
    def with_tool(builder: Any) -> Any:
        return builder.include_file_tools(False).tool(WebFetchTool(allow_private=True))

    approvals = ScriptedApprovals([True, False, True])
    outcome = await run_calls(
        [
            Call("web_fetch", {"url": server.url("/redirect")}),
            Call("web_fetch", {"url": server.url("/ok?from=redirect")}),
            Call("web_fetch", {"url": server.url("/ok?from=redirect")}),
        ],
        approvals,
        configure=with_tool,
    )
    assert len(approvals.asked) == 3
    redirect, denied, followed = outcome.tool_messages
    assert "redirect to" in redirect
    assert denied == "denied: denied by script"
    assert followed.endswith("hello from loopback\n")
    assert [seen.target for seen in server.requests] == ["/redirect", "/ok?from=redirect"]


async def test_cancel_during_a_stalled_fetch(ws_root: Path, server: Loopback) -> None:
    model = ScriptedModel([[Call("web_fetch", {"url": server.url("/slow")})], [Say("done")]])
    cancellation = AgentCancellation()
    builder = (
        AgentSession.builder(model, ws_root)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tool(WebFetchTool(allow_private=True))
        .approval_policy(ApproveAll())
    )
    with builder.build() as session, trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def turn() -> None:
                with pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)

            nursery.start_soon(turn)
            await server.stalled.wait()
            cancellation.cancel()
        [tool] = [m for m in session.history if m.role == "tool"]
        assert "".join(p.text for p in tool.content if hasattr(p, "text")) == INTERRUPTED
