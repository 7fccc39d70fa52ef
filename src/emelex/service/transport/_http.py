"""The Host as an ASGI application: operations over HTTP, subscriptions over WebSocket.

The mapping is docs/service/protocol.md. Every body is bounded and depth-checked before
it is parsed, then decoded strictly into the route's request contract; every failure
is ``{"error": {"type", "message"}}`` with the status of the error's class. One app
serves one listener: the Unix socket's app has no token (file permissions
authenticate), a TCP listener's app requires its bearer token on every route except
the static page. With ``ag_ui``, ``POST /ag-ui/run`` answers AG-UI runs (``_agui``)
behind the same authentication.
"""

from __future__ import annotations

import contextlib
import logging
import mimetypes
import pathlib
import secrets
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs
import trio

from emelex._errors import EmelexError, LimitExceeded
from emelex._version import __version__
from emelex.contracts import (
    WIRE_VERSION,
    ContractError,
    Hello,
    WatchEnded,
    from_wire,
    to_wire,
)
from emelex.service._errors import (
    AttachmentError,
    ForkRefused,
    HostClosed,
    InteractionSettled,
    InvalidRequest,
    OperationConflict,
    QueueFull,
    RequestTimedOut,
    RequestTooLarge,
    TooManyConnections,
    Unauthorized,
    UnknownAgent,
    UnknownInteraction,
    UnknownInvocation,
    UnknownRoute,
    UnknownSession,
)
from emelex.service.transport._agui import serve_run
from emelex.service.transport._batching import send_batched
from emelex.service.transport._frames import batch_frames, hold, hold_all, update_frame
from emelex.service.transport._json import dump, parse_object
from emelex.service.transport._resource import RESOURCE_TYPE, ResourceBody, read_head
from emelex.service.transport._route_doc import route_document
from emelex.service.transport._routes import BY_PATH, Route

if TYPE_CHECKING:
    from emelex.service._host import Host

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_log = logging.getLogger("emelex.service")

#: The package directory of the web page (``GET /`` and ``GET /static/...``).
STATIC_DIR: Final = pathlib.Path(__file__).with_name("_static")
#: Bodies above this many bytes are parsed on a worker thread (the loop stays free).
_THREAD_PARSE_BYTES: Final = 64 * 1024
#: Operations that admit new work; a draining Host refuses them (503) and serves the rest.
ADMISSIONS: Final = frozenset({"createSession", "send", "fork", "execute", "startWorker"})

#: The answer status of each error class (the nearest listed base class wins).
_STATUS: Final[tuple[tuple[type[BaseException], int], ...]] = (
    (Unauthorized, 401),
    (RequestTooLarge, 413),
    (RequestTimedOut, 408),
    (UnknownRoute, 404),
    (InvalidRequest, 400),
    (UnknownSession, 404),
    (UnknownAgent, 404),
    (UnknownInteraction, 404),
    (UnknownInvocation, 404),
    (OperationConflict, 409),
    (InteractionSettled, 409),
    (ForkRefused, 409),
    (QueueFull, 429),
    (HostClosed, 503),
    (TooManyConnections, 503),
    (AttachmentError, 400),
    (ContractError, 400),
    (EmelexError, 400),
)


def status_of(error: BaseException) -> int:
    for cls, status in _STATUS:
        if isinstance(error, cls):
            return status
    return 500


def error_body(error: BaseException) -> dict[str, Any]:
    if isinstance(error, EmelexError):
        detail: dict[str, Any] = {"type": type(error).__name__, "message": str(error)[:4096]}
        if isinstance(error, LimitExceeded):  # the client rebuilds the same error from these
            detail |= {"limit": error.limit, "maximum": error.maximum, "actual": error.actual}
        return {"error": detail}
    return {"error": {"type": "ServiceError", "message": "internal error of the Host"}}


T = TypeVar("T")


@attrs.frozen
class Limits:
    """What a listener's clients may use. ``max_ws_message`` bounds each WebSocket
    message (hypercorn closes with 1009 above it); ``idle_seconds`` closes a connection
    that sends no request for that long; ``body_seconds`` bounds the arrival of a
    request's body (and of each chunk of a resource) and ``first_frame_seconds`` a
    subscription's first frames (its token and request); at most ``max_unauthenticated``
    upgrades may wait for a token frame at once (more are refused at once), so
    connections that never authenticate cannot take the slots of those that do. A
    request refused while its resource is still arriving has up to ``max_discard_bytes``
    more read and dropped, so its client gets the answer; past that, the connection
    closes after the answer."""

    max_body_bytes: int = 8 * 1024 * 1024
    max_ws_message: int = 64 * 1024
    max_connections: int = 1024
    idle_seconds: float = 5.0
    body_seconds: float = 10.0
    first_frame_seconds: float = 5.0
    max_unauthenticated: int = 64
    max_discard_bytes: int = 64 * 1024 * 1024


class HostApp:
    """The ASGI application of one listener of a Host."""

    def __init__(
        self,
        host: Host,
        *,
        token: str | None,
        limits: Limits | None = None,
        static_dir: pathlib.Path = STATIC_DIR,
        ag_ui: bool = False,
    ) -> None:
        self.host = host
        #: Whether ``POST /ag-ui/run`` is served (``emelex serve --ag-ui``).
        self.ag_ui = ag_ui
        self.limits = limits or Limits()
        self.static_dir = static_dir
        self.draining = False
        #: Upgrades waiting for their token frame now (bounded by the limits).
        self._unauthenticated = 0
        self._token = None if token is None else token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    # -- authentication -------------------------------------------------------------------
    def _authorized(self, scope: Scope) -> bool:
        if self._token is None:
            return True
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and self._check(given.strip())
        return False

    def _check(self, given: bytes) -> bool:
        assert self._token is not None
        return secrets.compare_digest(given, self._token)

    # -- HTTP -------------------------------------------------------------------------------
    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        method: str = scope["method"]
        if self.ag_ui and (path == "/ag-ui" or path.startswith("/ag-ui/")):
            await self._ag_ui(scope, receive, send)
            return
        if not path.startswith("/v1/"):
            await self._static(path, method, send)
            return
        try:
            if not self._authorized(scope):
                raise Unauthorized("this Host needs `Authorization: Bearer <token>`")
            if path == "/v1/hello" and method == "GET":
                hello = Hello(wire_version=WIRE_VERSION, software=f"emelex {__version__}")
                await _answer(send, 200, to_wire(hello))
                return
            if path == "/v1/routes" and method == "GET":
                await _answer(send, 200, route_document())
                return
            route = BY_PATH.get(path)
            if route is None or route.kind != "op":
                raise UnknownRoute(f"no operation at {path}")
            if method != "POST":
                raise InvalidRequest(f"{path} takes POST, not {method}")
            if route.resource and _content_type(scope) == RESOURCE_TYPE:
                head, first, more = await read_head(receive, self.limits.max_body_bytes)
                body = ResourceBody(first, more, receive, self.limits.body_seconds)
                await self._with_resource(route, head, body, send)
                return
            raw = await self._body(scope, receive)
            await _answer(send, 200, await self._run(route, raw))
        except Exception as exc:
            if status_of(exc) == 500:
                _log.exception("the Host failed a request to %s", path)
            await _answer(send, status_of(exc), error_body(exc))

    async def _ag_ui(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An AG-UI run (``_agui``): refused as JSON until its stream starts."""
        try:
            if not self._authorized(scope):
                raise Unauthorized("this Host needs `Authorization: Bearer <token>`")
            body = await self._body(scope, receive)
            await serve_run(
                self.host,
                scope,
                receive,
                send,
                body=body,
                max_bytes=self.limits.max_body_bytes,
                write_seconds=self.limits.body_seconds,
                draining=self.draining,
            )
        except Exception as exc:
            if status_of(exc) == 500:
                _log.exception("the Host failed an AG-UI run")
            await _answer(send, status_of(exc), error_body(exc))

    async def _with_resource(
        self, route: Route, head: bytes, body: ResourceBody, send: Send
    ) -> None:
        """Run a request that carries a resource. Refused before its resource ended, the
        rest is read (within the limits) so the client, still sending, gets the answer;
        past them the connection closes after the answer."""
        try:
            async with contextlib.aclosing(body.chunks()) as resource:
                result = await self._run(route, head, resource)
        except Exception as exc:
            ended = await body.discard(self.limits.max_discard_bytes)
            if status_of(exc) == 500:
                _log.exception("the Host failed a request to %s", route.path)
            await _answer(send, status_of(exc), error_body(exc), close=not ended)
            return
        await _answer(send, 200, result)

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self.limits.max_body_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise RequestTooLarge(
                    f"the body holds {int(value)} bytes; the Host accepts {limit}"
                )
        chunks: list[bytes] = []
        size = 0
        # A body announced and never sent would hold its connection's slot forever.
        deadline = trio.current_time() + self.limits.body_seconds
        while True:
            message = await self._before(deadline, receive, "the request's body")
            if message["type"] == "http.disconnect":
                raise InvalidRequest("the client left before sending its body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # a streamed body is refused as soon as it passes the bound
                raise RequestTooLarge(f"the body exceeds the {limit} bytes the Host accepts")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _run(
        self, route: Route, raw: bytes, resource: AsyncIterator[bytes] | None = None
    ) -> Any:
        limit = self.limits.max_body_bytes
        if len(raw) > _THREAD_PARSE_BYTES:
            data = await trio.to_thread.run_sync(lambda: parse_object(raw, max_bytes=limit))
        else:
            data = parse_object(raw, max_bytes=limit)
        request: Any = from_wire(route.request, data)
        if self.draining and route.name in ADMISSIONS:
            raise HostClosed("the Host is draining: it admits no new work")
        if route.resource:
            result = await route.call(self.host, request, resource)
        else:
            result = await route.call(self.host, request)
        return None if result is None else to_wire(result)

    async def _static(self, path: str, method: str, send: Send) -> None:
        if method not in ("GET", "HEAD"):
            await _answer(send, 404, error_body(UnknownRoute(f"no page at {path}")))
            return
        relative = "index.html" if path == "/" else path.removeprefix("/static/")
        root = self.static_dir.resolve()
        target = (root / relative).resolve()
        found = (
            (path == "/" or path.startswith("/static/"))
            and target.is_relative_to(root)
            and await trio.Path(target).is_file()
        )
        if not found:
            await _answer(send, 404, error_body(UnknownRoute(f"no page at {path}")))
            return
        body = await trio.Path(target).read_bytes()
        kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind.endswith(("javascript", "json")):
            kind += "; charset=utf-8"
        headers = [
            (b"content-type", kind.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"x-content-type-options", b"nosniff"),
            # blob: images: the Files preview shows verified image bytes from a Blob URL.
            (
                b"content-security-policy",
                b"default-src 'self'; img-src 'self' blob:; frame-ancestors 'none'",
            ),
            (b"cache-control", b"no-cache"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else body})

    # -- WebSocket --------------------------------------------------------------------------
    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        await send({"type": "websocket.accept"})
        socket = _Socket(receive, send, self.limits.max_ws_message)
        try:
            route = BY_PATH.get(scope["path"])
            deadline = trio.current_time() + self.limits.first_frame_seconds
            if self._authorized(scope):
                first = await self._before(deadline, socket.receive_object, "the request frame")
            else:
                first = await self._authenticate(socket, deadline)
            if route is None or route.kind != "sub":
                raise UnknownRoute(f"no subscription at {scope['path']}")
            request: Any = from_wire(route.request, first)
            batch = urllib.parse.parse_qs(scope.get("query_string", b"").decode()).get("batch")
            await self._stream(route, request, socket, batch=batch == ["1"])
        except Exception as caught:
            # The stream runs in a nursery: its error arrives as a group of one.
            exc = _sole(caught)
            if isinstance(exc, _Gone):
                return
            if status_of(exc) == 500:
                _log.exception("the Host failed a subscription to %s", scope["path"])
            else:
                _log.info("subscription to %s refused: %s", scope["path"], exc)
            await socket.finish(error_body(exc), code=1008)

    async def _authenticate(self, socket: _Socket, deadline: float) -> dict[str, Any]:
        """The frame after a valid token frame; few upgrades may wait for theirs."""
        if self._unauthenticated >= self.limits.max_unauthenticated:
            raise TooManyConnections("too many connections are waiting to authenticate")
        self._unauthenticated += 1
        try:
            first = await self._before(deadline, socket.receive_object, "the token frame")
        finally:
            self._unauthenticated -= 1
        given = first.get("token")
        if set(first) != {"token"} or not isinstance(given, str):
            raise Unauthorized("send the bearer token (header or first frame)")
        if not self._check(given.encode()):
            raise Unauthorized("wrong bearer token")
        return await self._before(deadline, socket.receive_object, "the request frame")

    @staticmethod
    async def _before(deadline: float, receive: Callable[[], Awaitable[T]], what: str) -> T:
        """``await receive()`` by ``deadline`` (:class:`RequestTimedOut` after it)."""
        with trio.move_on_at(deadline):
            return await receive()
        raise RequestTimedOut(f"{what} did not arrive in time")

    async def _stream(self, route: Route, request: Any, socket: _Socket, *, batch: bool) -> None:
        async with trio.open_nursery() as nursery:
            # The client sends nothing after its request: a frame is a protocol error and
            # a close ends the subscription (the reader cancels the stream).
            failure: list[BaseException] = []
            nursery.start_soon(socket.watch_peer, nursery.cancel_scope, failure)
            async with route.call(self.host, request) as updates:
                if batch:
                    await send_batched(updates, socket.send_batch, socket.send_end)
                else:
                    await _send_each(updates, socket)
            nursery.cancel_scope.cancel()
        if failure:
            raise failure[0]
        await socket.close(1000)


async def _send_each(updates: AsyncIterator[Any], socket: _Socket) -> None:
    async for update in updates:
        if isinstance(update, WatchEnded):
            await socket.send({"end": to_wire(update)})
            return
        lease = hold(update)
        try:
            await socket.send_text(update_frame(update))
        finally:
            if lease is not None:
                lease.release()
    await socket.send({"end": None})


class _Gone(Exception):
    """The WebSocket peer left."""


def _sole(error: Exception) -> Exception:
    """The one error inside nested groups of one (what a nursery raises for a single
    failure), else ``error`` itself."""
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return error


class _Socket:
    """The server side of one subscription's WebSocket, bounded and backpressured."""

    def __init__(self, receive: Receive, send: Send, max_message: int) -> None:
        self._receive = receive
        self._send = send
        self._max = max_message
        self._closed = False

    async def receive_object(self) -> dict[str, Any]:
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            self._closed = True
            raise _Gone
        text = message.get("text")
        if text is None:
            raise InvalidRequest("frames are JSON text, not binary")
        raw = text.encode()
        return parse_object(raw, max_bytes=self._max)

    async def watch_peer(self, scope: trio.CancelScope, failure: list[BaseException]) -> None:
        message = await self._receive()
        if message["type"] == "websocket.disconnect":
            self._closed = True
        else:
            failure.append(InvalidRequest("a subscription takes one request frame"))
        scope.cancel()

    async def send(self, value: Any) -> None:
        # Awaited: a slow reader slows only this subscription (the Host's bounded buffer
        # for it then fills and it ends `lagged`).
        if self._closed:
            raise _Gone
        await self.send_text(dump(value).decode())

    async def send_text(self, text: str) -> None:
        if self._closed:
            raise _Gone
        await self._send({"type": "websocket.send", "text": text})

    async def send_batch(self, updates: list[Any]) -> None:
        leases = hold_all(updates)
        try:
            for text in batch_frames(updates):
                await self.send_text(text)
        finally:
            for lease in leases:
                lease.release()

    async def send_end(self, end: WatchEnded | None) -> None:
        await self.send({"end": None if end is None else to_wire(end)})

    async def close(self, code: int) -> None:
        if not self._closed:
            self._closed = True
            await self._send({"type": "websocket.close", "code": code})

    async def finish(self, value: Any, *, code: int) -> None:
        if not self._closed:
            await self.send(value)
            await self.close(code)


def _content_type(scope: Scope) -> str:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bytes(value).split(b";")[0].strip().decode("latin-1").lower()
    return ""


async def _answer(send: Send, status: int, value: Any, *, close: bool = False) -> None:
    body = dump(value)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if close:  # the request's body was left unread: the connection cannot carry another
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
