"""``HostClient``: the Host's operations over the wire, with the in-process Host's methods.

Requests go through httpx (over the Host's Unix socket, or TCP with a bearer token);
subscriptions open a WebSocket (``_websocket``). Errors the Host answers come back as
the same emelex error classes the in-process Host raises. A request that fails in
transit is retried with the identical body, so a mutation keeps its operation reference
and the Host answers the retry with the original receipt.
"""

from __future__ import annotations

import inspect
import os
import pathlib
import ssl
import urllib.parse
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
)
from contextlib import asynccontextmanager
from typing import Any, Final, TypeVar, cast

import httpx
import trio

from emelex._errors import EmelexError, LimitExceeded
from emelex.contracts import (
    ContractError,
    ContractLimitExceeded,
    Hello,
    WatchEnded,
    decode_trusted,
    from_wire,
    to_wire,
)
from emelex.service import _errors
from emelex.service._api import HostAPI
from emelex.service._errors import TransportError
from emelex.service.transport._frames import FrameCache
from emelex.service.transport._json import dump, load_fast
from emelex.service.transport._resource import RESOURCE_TYPE, RequestWithResource
from emelex.service.transport._routes import BY_METHOD, BY_NAME, Route
from emelex.service.transport._websocket import WebSocket

#: Where a root's Host listens, relative to the root.
SOCKET_NAME: Final = ".emelex/host.sock"
#: The largest answer or update the client accepts (a history page of 500 long rows fits).
MAX_ANSWER_BYTES: Final = 256 * 1024 * 1024
#: The Host scans a fixed page of rows per search call; the field only satisfies the contract.
_SEARCH_LIMIT: Final = 200
#: Delays before each retry of a request that failed in transit.
RETRY_DELAYS: Final = (0.05, 0.2, 1.0)
#: Bytes of a resource handed to the HTTP client at a time.
RESOURCE_CHUNK: Final = 256 * 1024

_ERROR_CLASSES: Final[dict[str, type[EmelexError]]] = {
    "ContractError": ContractError,
    "ContractLimitExceeded": ContractLimitExceeded,
} | {
    cls.__name__: cls
    for module in (_errors,)
    for cls in vars(module).values()
    if isinstance(cls, type) and issubclass(cls, EmelexError)
}


def rebuild_error(body: Any, status: int) -> EmelexError:
    """The emelex error an error answer names (``ServiceError`` for an unknown type)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if not isinstance(detail, dict) or not isinstance(detail.get("type"), str):
        return TransportError(f"the Host answered {status} without an error object")
    message = str(detail.get("message", ""))
    cls = _ERROR_CLASSES.get(detail["type"], _errors.ServiceError)
    if issubclass(cls, LimitExceeded):
        limit, maximum, actual = detail.get("limit"), detail.get("maximum"), detail.get("actual")
        if isinstance(limit, str) and isinstance(maximum, int):
            return cls(limit, maximum, actual if isinstance(actual, int) else None)
        return ContractError(message)
    return cls(message)


F = TypeVar("F", bound=Callable[..., Any])


def _bind(declared: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    bound = inspect.signature(declared).bind(None, *args, **kwargs)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["self"]
    return arguments


def _route_for(declared: Callable[..., Any], arguments: dict[str, Any]) -> Route:
    """The route of a method call: the one whose implied arguments the call has."""
    for route in BY_METHOD[declared.__name__]:
        if all(arguments.get(key) == value for key, value in route.fixed.items()):
            return route
    raise TypeError(f"no route serves {declared.__name__} with {arguments!r}")


def remote(declared: F) -> F:
    """A HostClient method for the HostAPI operation ``declared``: its arguments become
    the request of the operation's route, its answer comes back as the method's."""

    async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        arguments = _bind(declared, args, kwargs)
        route = _route_for(declared, arguments)
        resource = arguments.get("resource") if route.resource else None
        return route.unwrap(await self._op(route.name, route.build(arguments), resource))

    method.__name__ = method.__qualname__ = declared.__name__
    method.__doc__ = f"As :meth:`Host.{declared.__name__}`, over the wire."
    # inspect (and help()) show the protocol's signature, not (*args, **kwargs).
    method.__dict__["__signature__"] = inspect.signature(declared)
    return cast(F, method)


def remote_subscription(declared: F) -> F:
    """A HostClient subscription (an async context manager) for ``declared``."""

    @asynccontextmanager
    async def method(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        arguments = _bind(declared, args, kwargs)
        route = _route_for(declared, arguments)
        async with self._subscribe(route.name, route.build(arguments)) as updates:
            yield updates

    method.__name__ = method.__qualname__ = declared.__name__
    method.__doc__ = f"As :meth:`Host.{declared.__name__}`, over the wire."
    # inspect (and help()) show the protocol's signature, not (*args, **kwargs).
    method.__dict__["__signature__"] = inspect.signature(declared)
    return cast(F, method)


class HostClient:
    """A Host reached over its socket or TCP: the methods of :class:`Host` (each one
    awaits, ``sessions`` and ``queue`` included). Open with :meth:`connect`."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        open_stream: Callable[[], Awaitable[trio.abc.Stream]],
        *,
        authority: str,
        token: str | None,
    ) -> None:
        self._http = http
        self._open_stream = open_stream
        self._authority = authority
        self._headers = {} if token is None else {"authorization": f"Bearer {token}"}

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        url: str | None = None,
        *,
        root: str | os.PathLike[str] | None = None,
        token: str | None = None,
        verify: ssl.SSLContext | bool = True,
        request_timeout: float = 30.0,
    ) -> AsyncIterator[HostClient]:
        """``connect(root=DIR)`` reaches the Host serving ``DIR`` through its Unix socket;
        ``connect("http://127.0.0.1:8000", token=...)`` (or ``https://``) over TCP.
        ``request_timeout`` bounds each request's connect, read and write (never a subscription's
        wait for updates: cancel that from outside)."""
        if (url is None) == (root is None):
            raise TypeError("HostClient.connect takes a url or root=, not both")
        limits = httpx.Timeout(request_timeout)
        if root is not None:
            path = str(pathlib.Path(root) / SOCKET_NAME)

            async def open_unix() -> trio.abc.Stream:
                return await trio.open_unix_socket(path)

            # No TLS on a Unix socket: verify=False spares loading the CA bundle, and no
            # proxy from the environment applies to a socket path.
            transport = httpx.AsyncHTTPTransport(uds=path, retries=0, verify=False)
            http = httpx.AsyncClient(
                transport=transport, base_url="http://emelex", timeout=limits, trust_env=False
            )
            async with http:
                yield cls(http, open_unix, authority="emelex", token=token)
            return
        assert url is not None
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL of a Host: {url!r}")
        hostname = parts.hostname
        port = parts.port or (443 if parts.scheme == "https" else 80)
        context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            context = verify if isinstance(verify, ssl.SSLContext) else ssl.create_default_context()
            if verify is False:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE

        async def open_tcp() -> trio.abc.Stream:
            stream: trio.abc.Stream = await trio.open_tcp_stream(hostname, port)
            if context is not None:
                tls = trio.SSLStream(stream, context, server_hostname=hostname)
                await tls.do_handshake()
                stream = tls
            return stream

        base = f"{parts.scheme}://{parts.netloc}"
        http = httpx.AsyncClient(
            base_url=base, timeout=limits, verify=context if context is not None else True
        )
        async with http:
            yield cls(http, open_tcp, authority=parts.netloc, token=token)

    # -- the exchange -----------------------------------------------------------------------
    async def _op(
        self, name: str, request: Any, resource: bytes | AsyncIterable[bytes] | None = None
    ) -> Any:
        route = BY_NAME[name]
        headers = {"content-type": "application/json", **self._headers}
        if resource is not None:
            headers["content-type"] = RESOURCE_TYPE
        # A streamed resource cannot be sent twice: its request is tried once.
        streamed = resource is not None and not isinstance(resource, bytes)
        for delay in (None,) if streamed else (*RETRY_DELAYS, None):
            line = dump(to_wire(request))
            body: bytes | RequestWithResource = line
            if resource is not None:
                body = RequestWithResource(line + b"\n", resource, RESOURCE_CHUNK)
            try:
                response = await self._http.post(route.path, content=body, headers=headers)
                raw = await response.aread()
                break
            except httpx.TransportError as exc:
                # The same body again: a mutation's operation reference makes the Host
                # answer a retry with its original receipt, never apply it twice.
                if delay is None:
                    raise TransportError(f"cannot reach the Host: {_describe(exc)}") from exc
                await trio.sleep(delay)
            finally:
                if isinstance(body, RequestWithResource):
                    await body.aclose()
        value = _decode(raw)
        if response.status_code != 200:
            raise rebuild_error(value, response.status_code)
        if value is None and route.nullable:
            return None
        return from_wire(route.result, value)

    @asynccontextmanager
    async def _subscribe(self, name: str, request: Any) -> AsyncIterator[AsyncIterator[Any]]:
        route = BY_NAME[name]
        stream = await self._connect_stream()
        headers = [(k.encode(), v.encode()) for k, v in self._headers.items()]
        socket = await WebSocket.open(
            stream,
            host=self._authority,
            target=route.path + "?batch=1",  # updates that queued up share a frame
            headers=headers,
            max_message=MAX_ANSWER_BYTES,
        )
        updates = _updates(socket, route.result)
        try:
            await socket.send_text(dump(to_wire(request)).decode())
            yield updates
        finally:
            await updates.aclose()
            await socket.aclose()

    async def _connect_stream(self) -> trio.abc.Stream:
        for delay in (*RETRY_DELAYS, None):
            try:
                return await self._open_stream()
            except OSError as exc:
                if delay is None:
                    raise TransportError(f"cannot reach the Host: {_describe(exc)}") from exc
                await trio.sleep(delay)
        raise AssertionError("unreachable")

    # -- discovery ---------------------------------------------------------------------------
    async def hello(self) -> Hello:
        """The Host's wire version and software."""
        return from_wire(Hello, await self._get("/v1/hello"))

    async def routes(self) -> dict[str, Any]:
        """The OpenAPI-style document of the Host's routes."""
        value: dict[str, Any] = await self._get("/v1/routes")
        return value

    async def _get(self, path: str) -> Any:
        try:
            response = await self._http.get(path, headers=self._headers)
            raw = await response.aread()
        except httpx.TransportError as exc:
            raise TransportError(f"cannot reach the Host: {_describe(exc)}") from exc
        value = _decode(raw)
        if response.status_code != 200:
            raise rebuild_error(value, response.status_code)
        return value

    # -- the Host's operations: each derived from its route and HostAPI signature -----
    create_session = remote(HostAPI.create_session)
    sessions = remote(HostAPI.sessions)
    send = remote(HostAPI.send)
    stop = remote(HostAPI.stop)
    queue = remote(HostAPI.queue)
    pending_interactions = remote(HostAPI.pending_interactions)
    interaction = remote(HostAPI.interaction)
    respond = remote(HostAPI.respond)
    execute = remote(HostAPI.execute)
    execute_result = remote(HostAPI.execute_result)
    start_worker = remote(HostAPI.start_worker)
    workers = remote(HostAPI.workers)
    diagnostics = remote(HostAPI.diagnostics)
    watch_diagnostics = remote_subscription(HostAPI.watch_diagnostics)
    fork = remote(HostAPI.fork)
    fork_receipt = remote(HostAPI.fork_receipt)
    history = remote(HostAPI.history)
    read_row = remote(HostAPI.read_row)
    read_history = remote(HostAPI.read_history)
    search = remote(HostAPI.search)
    watch = remote_subscription(HostAPI.watch)
    context = remote(HostAPI.context)
    git_status = remote(HostAPI.git_status)
    git_diff = remote(HostAPI.git_diff)
    snapshot_patch = remote(HostAPI.snapshot_patch)
    read_patch = remote(HostAPI.read_patch)
    list_files = remote(HostAPI.list_files)
    watch_files = remote_subscription(HostAPI.watch_files)
    read_file = remote_subscription(HostAPI.read_file)


def _describe(error: BaseException) -> str:
    """The first non-empty message along the error's causes (httpx's own can be empty)."""
    seen: BaseException | None = error
    while seen is not None:
        if str(seen):
            return f"{type(seen).__name__}: {seen}"
        seen = seen.__cause__ or seen.__context__
    return type(error).__name__


def _decode(raw: bytes | str) -> Any:
    """The JSON value of an answer or frame (an object, or null). The Host's answers
    are parsed directly: the decoders refuse runaway nesting (orjson with ValueError,
    CPython's with RecursionError), so the server's pre-parse depth scan is not paid twice."""
    if len(raw) > MAX_ANSWER_BYTES:
        raise TransportError(f"the Host's answer exceeds {MAX_ANSWER_BYTES} bytes")
    try:
        value = load_fast(raw)
    except (ValueError, RecursionError) as exc:
        raise TransportError(f"the Host's answer is not JSON: {exc}") from None
    if value is not None and not isinstance(value, dict):
        raise TransportError("the Host's answer is not a JSON object")
    return value


#: Decoded update frames by (update type, frame text): the watches of one session in
#: this process receive the same frames, and each is decoded once.
_DECODED = FrameCache()
#: Larger frames (a caught-up page, which no other watch shares) are not kept: holding
#: their thousands of objects only made the garbage collector's passes longer.
_MAX_DECODED_TEXT: Final = 16 * 1024


def _frame_updates(text: str, update_type: Any) -> tuple[Any, ...] | None:
    """The updates an update frame carries (None for an end frame: the caller reads
    it); typed errors for anything malformed."""
    key = (update_type, text) if len(text) <= _MAX_DECODED_TEXT else None
    found: tuple[Any, ...] | None = None if key is None else _DECODED.get(key)
    if found is not None:
        return found
    frame = _decode(text)
    if not isinstance(frame, dict) or len(frame) != 1:
        raise TransportError("the Host sent a frame that is not one update")
    if "updates" in frame:
        batch = frame["updates"]
        if not isinstance(batch, list) or not batch:
            raise TransportError("the Host sent an empty or malformed batch of updates")
        found = tuple(decode_trusted(update_type, wire) for wire in batch)
    elif "update" in frame:
        found = (decode_trusted(update_type, frame["update"]),)
    elif "end" in frame or "error" in frame:
        return None
    else:
        raise TransportError(f"the Host sent an unknown frame {sorted(frame)}")
    if key is not None:
        _DECODED.put(key, found)
    return found


async def _updates(socket: WebSocket, update_type: Any) -> AsyncGenerator[Any, None]:
    while True:
        text = await socket.receive_text()
        if text is None:
            raise TransportError("the Host closed the subscription without an end")
        updates = _frame_updates(text, update_type)
        if updates is not None:
            for update in updates:
                yield update
            continue
        frame = _decode(text)
        if "end" in frame:
            if frame["end"] is not None:
                yield decode_trusted(WatchEnded, frame["end"])
            return
        raise rebuild_error(frame, 0)
