"""The ``web_fetch`` tool: one approved HTTP(S) GET, bounded, with an SSRF guard.

What a call does, in order:

1. The URL is checked: ``http``/``https`` only, a host, no ``user:password@``.
2. The host is resolved once (Trio's ``getaddrinfo``). If any address it resolves to is
   loopback, private, link-local, multicast, reserved or otherwise not globally routable
   the fetch is refused, unless the tool was built with ``allow_private``. Cloud metadata
   endpoints (``169.254.169.254``, ``fd00:ec2::254``, ...) are refused even then.
3. The connection goes to the checked addresses only: a pinned network backend under an
   ``httpx.AsyncClient`` replaces the second DNS lookup a client would make, so a name
   that changes its answer between check and use (DNS rebinding) cannot redirect it. The
   ``Host`` header, TLS SNI and certificate verification all still use the host name.
4. One GET is sent with ``User-Agent: emelex/<version>``, no proxy or other setting from
   the environment (``trust_env=False``), no cookies (a fresh client per call, closed
   afterwards), ``Accept-Encoding: gzip, deflate``.
5. Redirects are not followed: the status and resolved ``Location`` go back to the model,
   and following them takes a new call (and a new approval).
6. The body is decoded as it streams and reading stops once ``max_body_bytes`` decoded
   bytes have arrived (the decompressor itself is bounded, so a compression bomb cannot
   inflate past the cap); the whole call is bounded by ``timeout_seconds``.
"""

from __future__ import annotations

import codecs
import ipaddress
import math
import ssl
import zlib
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import contextmanager
from typing import Any

import attrs
import httpcore
import httpx
import trio

from emelex._text import shorten
from emelex._version import __version__
from emelex.model import ToolDefinition
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin._common import cancelled_by, object_schema, show
from emelex.tools.builtin._errors import FetchRefused

#: Sent with every request: the exact emelex version.
USER_AGENT = f"emelex/{__version__}"
MAX_URL_CHARS = 8192
DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10.0
DEFAULT_BODY_BYTES = 256 * 1024
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""``resolver(host, port)`` → the host's addresses (textual IPs), in preference order."""

_IP = ipaddress.IPv4Address | ipaddress.IPv6Address

#: Cloud instance-metadata endpoints: refused even when private addresses are allowed.
METADATA_ADDRESSES: frozenset[_IP] = frozenset(
    ipaddress.ip_address(text)
    for text in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, ...
        "169.254.170.2",  # AWS ECS task metadata
        "169.254.170.23",  # AWS EKS pod identity
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS EKS pod identity over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
METADATA_REASON = "a cloud metadata endpoint"
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


# -- URLs and addresses --------------------------------------------------------------------


def parse_url(text: str) -> httpx.URL:
    """The URL to fetch, or :class:`FetchRefused` saying why it cannot be fetched."""
    if len(text) > MAX_URL_CHARS:
        raise FetchRefused(f"the URL is longer than {MAX_URL_CHARS} characters")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in text):
        raise FetchRefused("the URL contains whitespace or control characters")
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise FetchRefused(f"invalid URL: {exc}") from exc
    if url.scheme not in ("http", "https"):
        raise FetchRefused(f"only http and https URLs can be fetched, not {url.scheme!r}")
    if url.userinfo:
        raise FetchRefused("URLs with credentials (user:password@) are refused")
    if not url.raw_host:
        raise FetchRefused("the URL has no host")
    return url


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address carries (mapped, NAT64, 6to4, Teredo)."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address in _NAT64:
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    return found


def _category(address: _IP) -> str | None:
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_reserved:
        return "a reserved address"
    if address.is_private:
        return "a private address"
    if not address.is_global:
        return "not a globally routable address"
    return None


def address_refusal(text: str, *, allow_private: bool) -> str | None:
    """Why the fetch must not connect to the address ``text``, or None when it may."""
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    candidates: list[_IP] = []
    if isinstance(address, ipaddress.IPv6Address):
        candidates.extend(_embedded_ipv4(address))  # the more precise reason comes first
    candidates.append(address)
    for candidate in candidates:
        if candidate in METADATA_ADDRESSES:
            return METADATA_REASON
    if allow_private:
        return None
    for candidate in candidates:
        category = _category(candidate)
        if category is not None:
            return category
    return None


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` once with Trio's ``getaddrinfo`` (TCP addresses, in order)."""
    infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    addresses: list[str] = []
    for _family, _type, _proto, _name, sockaddr in infos:
        address = str(sockaddr[0])
        if address not in addresses:
            addresses.append(address)
    return addresses


# -- a transport that connects only to checked addresses ---------------------------------

_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
)


@contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _ERRORS:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__) from exc
        raise


class PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to ``host`` through the given addresses only, never resolving again."""

    def __init__(self, host: str, addresses: Sequence[str]) -> None:
        self._host = host
        self._addresses = tuple(addresses)
        self._inner = httpcore.TrioBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if host != self._host:
            raise httpcore.ConnectError(f"connection to unexpected host {host!r} refused")
        failure: Exception = httpcore.ConnectError("no address to connect to")
        for address in self._addresses:
            try:
                return await self._inner.connect_tcp(
                    address, port, timeout=timeout, socket_options=socket_options
                )
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not used by web_fetch")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with _mapped_errors():
            await self._stream.aclose()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport (HTTP/1.1, one connection, no proxy) over :class:`PinnedBackend`."""

    def __init__(self, host: str, addresses: Sequence[str], ssl_context: Any) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=1,
            max_keepalive_connections=0,
            http1=True,
            http2=False,
            retries=0,
            network_backend=PinnedBackend(host, addresses),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped_errors():
            response = await self._pool.handle_async_request(core_request)
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        with _mapped_errors():
            await self._pool.aclose()


# -- bounded body decoding -----------------------------------------------------------------


class BodyDecoder:
    """Undoes ``Content-Encoding`` (identity, gzip, deflate) with bounded output.

    :meth:`feed` returns at most ``room + 1`` decoded bytes, so the caller learns that the
    cap was passed without the decompressor ever producing more than one byte beyond it.
    A gzip body of several members (concatenated gzip files) is decoded member after
    member; zero padding after the last one is ignored. ``problem`` says why the decoded
    body is incomplete (a stream that ends early, undecodable trailing data), else None.
    """

    def __init__(self, content_encoding: str) -> None:
        codings = [c.strip().lower() for c in content_encoding.split(",")]
        codings = [c for c in codings if c and c != "identity"]
        if len(codings) > 1:
            raise FetchRefused(f"unsupported Content-Encoding {content_encoding!r}")
        self.kind = codings[0] if codings else "identity"
        self.problem: str | None = None
        self._pending = b""
        self._z: Any = None
        self._between = False  # gzip: a member ended; more data starts the next one
        self._fed = False
        self._gzip = self.kind in ("gzip", "x-gzip")
        if self._gzip:
            self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        elif self.kind not in ("identity", "deflate"):
            raise FetchRefused(f"unsupported Content-Encoding {content_encoding!r}")

    def feed(self, data: bytes, room: int) -> bytes:
        if self.kind == "identity":
            return data[: room + 1]
        self._fed = self._fed or bool(data)
        if self._z is None:  # deflate: a zlib wrapper or a raw stream (both are seen)
            self._pending += data
            if len(self._pending) < 2:
                return b""
            head, flags = self._pending[0], self._pending[1]
            wrapped = head & 0x0F == 8 and (head * 256 + flags) % 31 == 0
            self._z = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
            data, self._pending = self._pending, b""
        out = bytearray()
        while data and self.problem is None:
            if self._between:
                if not self._next_member(data):
                    return bytes(out)  # padding, or too little to tell yet
                data, self._pending = self._pending, b""
            try:
                out += self._z.decompress(data, room + 1 - len(out))
            except zlib.error as exc:
                raise FetchRefused(f"the {self.kind} response body is corrupt: {exc}") from exc
            if len(out) > room or not self._z.eof:
                break
            data = self._z.unused_data
            if not self._gzip:
                if data:
                    self.problem = "data follows the end of the deflate stream"
                break
            self._between = True
        return bytes(out)

    def _next_member(self, data: bytes) -> bool:
        """Between gzip members: keep ``data`` and start the next member once its magic
        number is seen (True); zero padding is dropped, anything else is a problem."""
        self._pending = (self._pending + data).lstrip(b"\0")
        if len(self._pending) < 2:
            return False
        if not self._pending.startswith(b"\x1f\x8b"):
            self.problem = "undecodable data follows the gzip stream"
            return False
        self._z = zlib.decompressobj(zlib.MAX_WBITS | 16)
        self._between = False
        return True

    def finish(self, room: int) -> bytes:
        if self.kind == "identity":
            return b""
        if self._between:
            if self._pending and self.problem is None:
                self.problem = "undecodable data follows the gzip stream"
            return b""
        if self._pending:
            self._z = zlib.decompressobj(-zlib.MAX_WBITS)
            data, self._pending = self._pending, b""
            return self.feed(data, room) + self.finish(room)
        if self._z is None:
            return b""
        try:
            tail = bytes(self._z.flush())[: room + 1]
        except zlib.error as exc:
            raise FetchRefused(f"the {self.kind} response body is corrupt: {exc}") from exc
        if self._fed and not self._z.eof and self.problem is None:
            self.problem = f"the {self.kind} stream ends early (the body was cut in transit)"
        return tail


_BINARY_TYPES = ("image/", "audio/", "video/", "font/")
_BINARY_SUBTYPES = ("octet-stream", "zip", "gzip", "pdf", "wasm", "x-tar", "protobuf")


def _is_text(content_type: str, body: bytes, charset: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind.startswith(_BINARY_TYPES) or any(s in kind for s in _BINARY_SUBTYPES):
        return False
    if charset.startswith(("utf-16", "utf-32")):
        return True  # NUL bytes are part of the encoding
    return b"\0" not in body[:8192]


#: The charset a body is decoded with when it declares none, or one that is not honoured.
DEFAULT_CHARSET = "utf-8"
# Text codecs that cannot decode an arbitrary body: domain-name and escape codecs, and
# "undefined", which always fails. (Bytes-to-bytes codecs such as hex, base64, zlib and
# rot13 are excluded by their codec info.)
_NOT_BODY_CHARSETS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape"}
)
_BOMS = {"utf-16": (b"\xff\xfe", b"\xfe\xff"), "utf-32": (b"\xff\xfe\0\0", b"\0\0\xfe\xff")}


def body_charset(declared: str | None) -> tuple[str, str | None]:
    """The codec to decode a text body with, and a note when ``declared`` is not used.

    Only text encodings are honoured; anything else (unknown names, bytes-to-bytes
    codecs, codecs that cannot decode arbitrary bytes) falls back to
    :data:`DEFAULT_CHARSET`.
    """
    if declared is None:
        return DEFAULT_CHARSET, None
    try:
        info = codecs.lookup(declared)
    except (LookupError, ValueError):  # ValueError: a NUL in the name
        return DEFAULT_CHARSET, f"unknown charset {_printable(declared, 60)!r}"
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_BODY_CHARSETS:
        return DEFAULT_CHARSET, f"charset {_printable(declared, 60)!r} is not a text encoding"
    return info.name, None


def decode_body(data: bytes, charset: str, *, final: bool) -> tuple[str, str | None]:
    """``data`` decoded with ``charset`` (invalid bytes replaced), falling back to
    :data:`DEFAULT_CHARSET` with a note if that codec still cannot decode it. UTF-16 and
    UTF-32 without a byte order mark are read as little-endian (as browsers do)."""
    name = charset
    boms = _BOMS.get(charset)
    if boms is not None and not data.startswith(boms):
        name = charset + "-le"
    try:
        return codecs.getincrementaldecoder(name)(errors="replace").decode(data, final=final), None
    except (UnicodeError, ValueError, TypeError, LookupError) as exc:
        text = codecs.getincrementaldecoder(DEFAULT_CHARSET)(errors="replace").decode(
            data, final=final
        )
        return text, f"charset {charset!r} could not decode the body ({type(exc).__name__})"


def _printable(text: str, limit: int = 300) -> str:
    cleaned = "".join(c if c.isprintable() else "?" for c in text)
    return shorten(cleaned, limit)


# -- the tool -------------------------------------------------------------------------------


@attrs.define
class _Progress:
    """What a fetch got before it ended (for timeout and cancellation messages)."""

    status: int | None = None
    received: int = 0


class WebFetchTool:
    """``web_fetch {url}``: one GET request, approved per call; see the module docs.

    ``allow_private`` lets fetches reach loopback and private networks (never metadata
    endpoints). ``resolver`` and ``ssl_context`` are for tests and special deployments;
    the defaults are Trio's ``getaddrinfo`` and certifi's CA bundle.
    """

    name = "web_fetch"

    def __init__(
        self,
        *,
        max_body_bytes: int = DEFAULT_BODY_BYTES,
        allow_private: bool = False,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT_SECONDS,
        resolver: Resolver | None = None,
        ssl_context: Any = None,
    ) -> None:
        if max_body_bytes < 1:
            raise ValueError(f"max_body_bytes must be positive, got {max_body_bytes}")
        for label, value in (("timeout", timeout_seconds), ("connect", connect_timeout_seconds)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{label} seconds must be positive, got {value}")
        self._max_body = max_body_bytes
        self._allow_private = allow_private
        self._timeout = timeout_seconds
        self._connect_timeout = min(connect_timeout_seconds, timeout_seconds)
        self._resolver: Resolver = resolver or system_resolver
        self._ssl_context = ssl_context
        self.authority_identity = {
            "private_addresses": "allowed" if allow_private else "refused",
            "user_agent": USER_AGENT,
        }
        self._definition = ToolDefinition(
            self.name,
            "Fetch one http(s) URL with a GET request and return the status, the main "
            f"headers and up to {max_body_bytes} bytes of the decoded body as text. "
            "Redirects are not followed: the target is returned and fetching it is a new "
            "call. Private and loopback addresses are "
            + ("allowed. " if allow_private else "refused. ")
            + "Every call asks the user for approval.",
            object_schema(
                {
                    "url": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_URL_CHARS,
                        "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://",
                        "description": "Absolute http:// or https:// URL, no credentials.",
                    }
                },
                ["url"],
            ),
        )

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        try:
            url = parse_url(arguments["url"])
        except FetchRefused:
            return None  # refused by invoke without any network access
        return (
            f"fetch {show(str(url))} with one HTTP GET request (redirects are not followed; "
            f"at most {self._max_body} bytes of the body are read)"
        )

    def _context(self) -> Any:
        if self._ssl_context is None:
            self._ssl_context = httpx.create_ssl_context(trust_env=False)
        return self._ssl_context

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        try:
            url = parse_url(invocation.arguments["url"])
        except FetchRefused as exc:
            return ToolOutput.error(f"web_fetch: {exc}")
        if not invocation.approved:
            return ToolOutput.error("web_fetch: this call needs approval and was not approved")
        progress = _Progress()
        with cancelled_by(invocation.cancellation) as scope:
            with trio.move_on_after(self._timeout):
                try:
                    return await self._fetch(url, progress)
                except FetchRefused as exc:
                    return ToolOutput.error(f"web_fetch: {exc}")
                except httpx.TimeoutException as exc:
                    return ToolOutput.error(
                        f"web_fetch: {show(str(url))} timed out "
                        f"({type(exc).__name__}){_got(progress)}"
                    )
                except httpx.HTTPError as exc:
                    return ToolOutput.error(
                        f"web_fetch: request to {show(str(url))} failed: {_describe(exc)}"
                    )
            if not scope.cancelled_caught:
                return ToolOutput.error(
                    f"web_fetch: {show(str(url))} did not complete within "
                    f"{self._timeout:g} s{_got(progress)}; nothing is returned"
                )
        return ToolOutput.error("web_fetch: cancelled with the turn")

    async def _fetch(self, url: httpx.URL, progress: _Progress) -> ToolOutput:
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = list(await self._resolver(host, port))
        except OSError as exc:
            raise FetchRefused(f"cannot resolve {host!r}: {exc}") from exc
        if not addresses:
            raise FetchRefused(f"{host!r} resolves to no address")
        for address in addresses:
            reason = address_refusal(address, allow_private=self._allow_private)
            if reason is not None:
                hint = (
                    " (private addresses are not allowed)"
                    if not self._allow_private and reason != METADATA_REASON
                    else ""
                )
                raise FetchRefused(f"refused: {host!r} resolves to {address}, {reason}{hint}")
        timeout = httpx.Timeout(self._timeout, connect=self._connect_timeout)
        async with (
            httpx.AsyncClient(
                transport=PinnedTransport(
                    host, addresses, self._context() if url.scheme == "https" else None
                ),
                trust_env=False,
                follow_redirects=False,
                timeout=timeout,
                headers={
                    "User-Agent": USER_AGENT,
                    "Accept": "*/*",
                    "Accept-Encoding": "gzip, deflate",
                },
            ) as client,
            client.stream("GET", url) as response,
        ):
            progress.status = response.status_code
            return await self._read(url, response, progress)

    async def _read(
        self, url: httpx.URL, response: httpx.Response, progress: _Progress
    ) -> ToolOutput:
        status = f"HTTP {response.status_code} {_printable(response.reason_phrase)}".rstrip()
        headers = response.headers
        location = headers.get("location")
        if response.status_code in _REDIRECTS and location is not None:
            try:
                target = show(str(url.join(location)))
            except (httpx.InvalidURL, ValueError):
                target = show(location) + " (not a valid URL)"
            return ToolOutput(
                f"{status}: redirect to {target}\n[not followed: to follow it, call "
                "web_fetch with that URL (a new call needs a new approval)]"
            )
        decoder = BodyDecoder(headers.get("content-encoding", ""))
        cap = self._max_body
        raw_cap = 2 * cap + 64 * 1024
        body = bytearray()
        raw = 0
        cut = False
        # Stopping early cancels the read instead of leaving the loop: the cancellation
        # surfaces at the next network read inside httpcore and unwinds every nested
        # async generator of the response stream, so none is left suspended (Trio warns
        # about, and would later have to finalize, an abandoned one).
        with trio.CancelScope() as stop:
            async for chunk in response.aiter_raw():
                if cut:
                    continue  # already-buffered data arriving before the read is cancelled
                raw += len(chunk)
                body += decoder.feed(chunk, cap - len(body))
                progress.received = len(body)
                if len(body) > cap or raw > raw_cap:
                    cut = True
                    stop.cancel()
        if not cut:
            body += decoder.finish(cap - len(body))
            cut = len(body) > cap
        data = bytes(body[:cap])
        content_type = headers.get("content-type", "")
        lines = [status, f"url: {show(str(url))}"]
        if content_type:
            lines.append(f"content-type: {_printable(content_type)}")
        if cut:
            lines.append(
                f"[body cut: only the first {len(data)} bytes were read (the limit is {cap} bytes)]"
            )
        elif decoder.problem is not None:
            lines.append(f"[body cut: {decoder.problem}; {len(data)} bytes decoded]")
        else:
            lines.append(f"[body: {len(data)} bytes]")
        charset, note = body_charset(response.charset_encoding)
        if data and _is_text(content_type, data, charset):
            text, failure = decode_body(data, charset, final=not cut)
            note = note or failure
            if note is not None:
                lines.append(f"[{note}; decoded as {DEFAULT_CHARSET.upper()} instead]")
            lines.append(text)
        elif data:
            lines.append("[binary body not shown]")
        return ToolOutput("\n".join(lines))


def _describe(exc: BaseException) -> str:
    """``Name: message`` of the most telling exception in ``exc``'s chain (a TLS error
    hidden under a connection error, for instance)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain and len(chain) < 10:
        chain.append(current)
        current = current.__cause__ or current.__context__
    tls = [e for e in chain if isinstance(e, ssl.SSLError)]
    telling = tls[0] if tls else next((e for e in chain if str(e)), exc)
    text = str(telling) or "no details"
    return _printable(f"{type(telling).__name__}: {text}", 500)


def _got(progress: _Progress) -> str:
    if progress.status is None:
        return ""
    return f" (HTTP {progress.status}, {progress.received} body bytes received)"
