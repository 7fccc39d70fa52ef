"""The Trio side of the HTTP backend: :class:`OpenAIModel` and its generation stream."""

from __future__ import annotations

import collections
import contextlib
import json
import math
import re
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Final, Literal

import attrs
import httpx
import trio

from emelex.model._capabilities import Capabilities
from emelex.model._errors import InvalidRequest
from emelex.model._estimate import TokenCounter, count_usage, estimate_usage
from emelex.model._events import Completed, GenerationEvent, Response
from emelex.model._forced import check_forced_call, requested_choice
from emelex.model._request import GenerationRequest
from emelex.model.openai._assembly import ChunkAssembler
from emelex.model.openai._errors import (
    ConnectionFailed,
    Disconnected,
    HTTPStatusError,
    MalformedChunk,
    OpenAIError,
    RateLimited,
    ResponseTooLarge,
    StreamError,
    StreamStalled,
)
from emelex.model.openai._http import ERROR_EXCERPT, retry_after_seconds, server_message
from emelex.model.openai._mapping import ReasoningFields, reasoning_effort_fields, request_body
from emelex.model.openai._sse import SSEEvent, SSEParser
from emelex.model.openai._tokens import LLAMA_CPP_PYTHON_COUNT_PATH, ServerTokenCounter, server_root
from emelex.runtime import AgentCancellation

DEFAULT_MAX_LINE_BYTES: Final = 1 << 20
"""Default bound on one SSE line or event (1 MiB)."""
DEFAULT_MAX_RESPONSE_BYTES: Final = 32 << 20
"""Default bound on one response body (32 MiB)."""
DEFAULT_STALL_TIMEOUT: Final = 300.0
"""Default seconds without a byte before a request fails (a long prompt on a CPU server
can take minutes before its first token)."""
DEFAULT_CONNECT_TIMEOUT: Final = 10.0
"""Default seconds to connect (and to wait for a free pooled connection)."""

_CLOSE_TIMEOUT: Final = 5.0
_DRAIN_SECONDS: Final = 1.0
_DRAIN_BYTES: Final = 64 * 1024
_ERROR_BODY_BYTES: Final = 16 * 1024
_UNKNOWN: Final = Capabilities.unknown()


class _Secret:
    """Holds the API key; its repr never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "<redacted>"

    __str__ = __repr__


def _positive_int(name: str, value: Any) -> int:
    if type(value) is not int or value < 1:
        raise InvalidRequest(f"{name} must be a positive integer, got {value!r}")
    return value


def _positive_seconds(name: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{name} must be a number of seconds, got {value!r}")
    seconds = float(value)
    if math.isnan(seconds) or seconds <= 0:
        raise InvalidRequest(f"{name} must be positive, got {value!r}")
    return seconds


def _check_url(base_url: Any) -> httpx.URL:
    if not isinstance(base_url, str) or not base_url:
        raise InvalidRequest(f"base_url must be a non-empty string, got {base_url!r}")
    try:
        url = httpx.URL(base_url)
    except (httpx.InvalidURL, ValueError, TypeError) as exc:
        raise InvalidRequest(f"base_url is not a valid URL: {exc}") from exc
    if url.scheme not in ("http", "https") or not url.host:
        raise InvalidRequest(f"base_url must be an http(s) URL with a host, got {base_url!r}")
    if url.query or url.fragment:
        raise InvalidRequest("base_url must not carry a query or a fragment")
    return url


def _shown_url(url: httpx.URL) -> str:
    return str(url.copy_with(username=None, password=None))


class OpenAIModel(trio.abc.AsyncResource):
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint, as an
    :class:`~emelex.model.AgentModel`.

    ``base_url`` includes the API version prefix, as in the OpenAI SDKs
    (``"https://api.openai.com/v1"``, ``"http://127.0.0.1:8080/v1"``); requests go to
    ``{base_url}/chat/completions`` with ``stream: true``. ``api_key`` is sent as a bearer
    token and never shown by ``repr``. ``capabilities`` is what you know about the served
    model's prompt format: a remote model cannot be probed, so the default is
    :meth:`Capabilities.unknown` and the harness defers to the server. When
    ``capabilities.reasoning_history`` is True, earlier reasoning is sent back as
    ``reasoning_content``.

    Transport: ``http_client`` is an ``httpx.AsyncClient`` to use (and not close); by
    default the model makes its own, closed by :meth:`aclose` (``async with model:``).
    ``headers`` are added to every request, ``extra_body`` fields to every request body
    (they override computed fields, e.g. ``{"chat_template_kwargs": {...}}``).
    ``reasoning_fields`` maps a :class:`~emelex.model.Reasoning` option to body fields
    (default :func:`reasoning_effort_fields`); ``include_usage`` asks for usage in the
    stream (``stream_options``).

    Usage is never silently zero: when the server reports none (llama-cpp-python's
    server never does while streaming), the response's usage is counted here and
    marked ``estimated``. ``token_counter`` chooses how: ``None`` (default) is the
    documented byte estimate of :func:`~emelex.model.estimate_usage`; ``"server"`` asks
    llama-cpp-python's ``/extras/tokenize/count`` beside ``base_url`` (the served model's
    own tokenizer; two small requests per generation, byte estimate if it fails); any
    :class:`~emelex.model.TokenCounter` is used as given. A generation stopped by its
    ``cancellation`` always gets the byte estimate (no request after a stop).

    Bounds (each failure is a typed :class:`OpenAIError`): ``max_line_bytes`` per SSE line
    or event (:class:`ChunkTooLarge`), ``max_response_bytes`` per response body
    (:class:`ResponseTooLarge`), ``stall_timeout`` seconds without a byte, waiting for the
    response or between reads (:class:`StreamStalled`; ``None`` waits forever), and
    ``connect_timeout`` to connect or get a pooled connection (:class:`ConnectionFailed`).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        capabilities: Capabilities = _UNKNOWN,
        http_client: httpx.AsyncClient | None = None,
        headers: Mapping[str, str] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        reasoning_fields: ReasoningFields = reasoning_effort_fields,
        include_usage: bool = True,
        token_counter: TokenCounter | Literal["server"] | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        stall_timeout: float | None = DEFAULT_STALL_TIMEOUT,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        url = _check_url(base_url)
        if not isinstance(model, str) or not model:
            raise InvalidRequest(f"model must be a non-empty string, got {model!r}")
        if api_key is not None and (
            not isinstance(api_key, str) or not api_key or any(c in api_key for c in "\r\n\0")
        ):
            raise InvalidRequest("api_key must be a non-empty string without line breaks")
        if not isinstance(capabilities, Capabilities):
            raise InvalidRequest(f"capabilities must be Capabilities, got {capabilities!r}")
        if http_client is not None and not isinstance(http_client, httpx.AsyncClient):
            raise InvalidRequest(f"http_client must be an httpx.AsyncClient, got {http_client!r}")
        if not callable(reasoning_fields):
            raise InvalidRequest("reasoning_fields must be callable")
        extra = dict(extra_body or {})
        if not all(isinstance(key, str) for key in extra):
            raise InvalidRequest("extra_body keys must be strings")
        self._base_url = url
        self._endpoint = httpx.URL(str(url).rstrip("/") + "/chat/completions")
        self._model = model
        self._api_key = _Secret(api_key) if api_key is not None else None
        self._capabilities = capabilities
        self._extra_body = extra
        self._reasoning_fields = reasoning_fields
        self._include_usage = bool(include_usage)
        self._max_line = _positive_int("max_line_bytes", max_line_bytes)
        self._max_response = _positive_int("max_response_bytes", max_response_bytes)
        self._stall = _positive_seconds("stall_timeout", stall_timeout, optional=True)
        connect = _positive_seconds("connect_timeout", connect_timeout)
        assert connect is not None
        self._timeout = httpx.Timeout(
            connect=connect, read=self._stall, write=self._stall, pool=connect
        )
        try:
            self._headers = httpx.Headers(
                {
                    "Accept": "text/event-stream",
                    "Accept-Encoding": "identity",
                    **dict(headers or {}),
                }
            )
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(f"headers must map strings to strings: {exc}") from exc
        if api_key is not None:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._owns_client = http_client is None
        self._client = http_client if http_client is not None else httpx.AsyncClient()
        self._token_counter: TokenCounter | None
        if token_counter == "server":
            auth = self._headers.get("Authorization")
            self._token_counter = ServerTokenCounter(
                server_root(str(url)) + LLAMA_CPP_PYTHON_COUNT_PATH,
                http_client=self._client,
                model=model,
                headers=httpx.Headers({"Authorization": auth}) if auth else None,
                timeout=connect + (self._stall or DEFAULT_STALL_TIMEOUT),
            )
        elif token_counter is None or isinstance(token_counter, TokenCounter):
            self._token_counter = token_counter
        else:
            raise InvalidRequest(
                f'token_counter must be a TokenCounter, "server" or None, got {token_counter!r}'
            )

    # -- configuration ----------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        """What was configured about the served model (unknown by default)."""
        return self._capabilities

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return str(self._base_url)

    @property
    def endpoint(self) -> str:
        """The URL requests are sent to."""
        return str(self._endpoint)

    @property
    def http_client(self) -> httpx.AsyncClient:
        return self._client

    @property
    def stall_timeout(self) -> float | None:
        return self._stall

    @property
    def token_counter(self) -> TokenCounter | None:
        """What counts usage the server does not report (``None``: the byte estimate)."""
        return self._token_counter

    def request_body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON body this model would send for ``request`` (no I/O).

        Raises :class:`UnsupportedContent` for content the format cannot carry.
        """
        if not isinstance(request, GenerationRequest):
            raise InvalidRequest(f"expected a GenerationRequest, got {type(request).__name__}")
        return request_body(
            request,
            self._model,
            send_reasoning=self._capabilities.reasoning_history is True,
            include_usage=self._include_usage,
            reasoning_fields=self._reasoning_fields,
            extra_body=self._extra_body,
        )

    # -- lifetime ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client if this model made it (shielded, bounded). Idempotent."""
        if self._owns_client and not self._client.is_closed:
            with trio.CancelScope(shield=True, relative_deadline=_CLOSE_TIMEOUT):
                await self._client.aclose()

    # -- generation -------------------------------------------------------------------------
    def generate(
        self, request: GenerationRequest, *, cancellation: AgentCancellation | None = None
    ) -> OpenAIStream:
        """Prepare one generation; enter the result to send it (see
        :class:`~emelex.model.AgentModel` for the stream contract).

        Calling does not checkpoint. Entering builds the body (raising
        :class:`UnsupportedContent`), sends it and waits for the response headers; it
        raises :class:`ConnectionFailed`, :class:`StreamStalled`, :class:`Disconnected`,
        :class:`HTTPStatusError` or :class:`RateLimited`. Iterating raises
        :class:`MalformedChunk`, :class:`MalformedToolCall`, :class:`StreamError`,
        :class:`ChunkTooLarge`, :class:`ResponseTooLarge`, :class:`StreamStalled` or
        :class:`Disconnected`.

        After a finished stream, leaving the block reads the rest of the body (at most
        1 s and 64 KiB) so the connection goes back to the pool. Leaving early, an error
        or cancellation closes the HTTP response instead (shielded, bounded; the
        connection is discarded); either way the client stays usable.

        ``cancellation`` (an :class:`AgentCancellation`) stops the request the same way,
        but the stream then ends normally with ``finish_reason="cancelled"``, the text
        and reasoning so far and no tool calls.
        """
        if not isinstance(request, GenerationRequest):
            raise InvalidRequest(f"expected a GenerationRequest, got {type(request).__name__}")
        if cancellation is not None and not isinstance(cancellation, AgentCancellation):
            raise InvalidRequest(f"cancellation must be an AgentCancellation, got {cancellation!r}")
        return OpenAIStream(self, request, cancellation)

    def _build(self, request: GenerationRequest) -> httpx.Request:
        body = json.dumps(
            self.request_body(request), ensure_ascii=False, separators=(",", ":")
        ).encode("utf-8")
        headers = self._headers.copy()
        headers["Content-Type"] = "application/json"
        return self._client.build_request(
            "POST", self._endpoint, content=body, headers=headers, timeout=self._timeout
        )

    def __repr__(self) -> str:
        key = "<redacted>" if self._api_key is not None else "None"
        return (
            f"OpenAIModel(base_url={_shown_url(self._base_url)!r}, model={self._model!r}, "
            f"api_key={key})"
        )


def _transport_error(
    exc: httpx.HTTPError, endpoint: httpx.URL, stall: float | None, during: str
) -> OpenAIError:
    where = _shown_url(endpoint)
    detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if isinstance(
        exc,
        httpx.ConnectError
        | httpx.ConnectTimeout
        | httpx.PoolTimeout
        | httpx.ProxyError
        | httpx.UnsupportedProtocol,
    ):
        return ConnectionFailed(f"cannot connect to {where} ({detail})")
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout):
        bound = stall if stall is not None else math.inf
        return StreamStalled(f"{where} sent nothing for {bound:g} s {during}", timeout=bound)
    if isinstance(exc, httpx.TransportError):
        return Disconnected(f"the connection to {where} broke {during} ({detail})")
    return OpenAIError(f"HTTP request to {where} failed {during} ({detail})")


_VERSIONED = re.compile(r"/v\d+[a-z0-9]*$")


def _status_hint(status: int, model: OpenAIModel) -> str | None:
    """A 404 from a base URL without an API version prefix: OpenAI-compatible servers
    (llama.cpp, vLLM, OpenAI itself) serve ``/v1/chat/completions``."""
    base = model._base_url
    path = base.path.rstrip("/")
    if status != 404 or _VERSIONED.search(path):
        return None
    suggested = _shown_url(base.copy_with(path=path + "/v1"))
    return f"the base URL has no /v1; OpenAI-compatible servers usually need it: try {suggested}"


class OpenAIStream:
    """One generation against an OpenAI-compatible server: an async context manager
    (entering sends the request) and the async iterator of its events (see
    :meth:`OpenAIModel.generate`).

    After the response headers, :attr:`status_code` and :attr:`headers` are set; as
    chunks arrive, :attr:`response_id`, :attr:`served_model`, :attr:`finish_reason` (the
    server's own text) and :attr:`usage_reported` describe what the server said.
    """

    def __init__(
        self,
        model: OpenAIModel,
        request: GenerationRequest,
        cancellation: AgentCancellation | None,
    ) -> None:
        self._model = model
        self._request = request
        self._cancellation = cancellation
        self._remove_callback: Any = None
        self._entered = False
        self._response: httpx.Response | None = None
        self._chunks: AsyncIterator[bytes] | None = None
        self._sse = SSEParser(model._max_line)
        self._assembler = ChunkAssembler()
        self._ready: collections.deque[GenerationEvent] = collections.deque()
        self._json: bytearray | None = None
        self._received = 0
        self._scope: trio.CancelScope | None = None
        self._cancelled = False
        self._finished = False
        self.status_code: int | None = None
        self.headers: httpx.Headers | None = None

    # -- what the server said -----------------------------------------------------------------
    @property
    def response_id(self) -> str | None:
        return self._assembler.response_id

    @property
    def served_model(self) -> str | None:
        return self._assembler.served_model

    @property
    def finish_reason(self) -> str | None:
        return self._assembler.finish_reason

    @property
    def usage_reported(self) -> bool:
        """Whether the server reported token usage (otherwise the response's usage was
        counted here and is marked ``estimated``)."""
        return self._assembler.usage is not None

    # -- context ----------------------------------------------------------------------------
    def _on_cancel(self) -> None:
        self._cancelled = True
        if self._scope is not None:
            self._scope.cancel()

    async def __aenter__(self) -> OpenAIStream:
        if self._entered:
            raise OpenAIError("a generation stream can be entered only once")
        self._entered = True
        model = self._model
        http_request = model._build(self._request)
        client = model._client
        if client.is_closed:
            raise OpenAIError(f"{model!r}: its HTTP client is closed")
        if self._cancellation is not None:
            self._remove_callback = self._cancellation.add_callback(self._on_cancel)
        try:
            with trio.CancelScope() as scope:
                self._scope = scope
                if self._cancelled:
                    scope.cancel()
                try:
                    self._response = await client.send(http_request, stream=True)
                except httpx.HTTPError as exc:
                    raise _transport_error(
                        exc, model._endpoint, model._stall, "before answering"
                    ) from exc
                finally:
                    self._scope = None
            response = self._response
            if response is not None:
                self.status_code = response.status_code
                self.headers = response.headers
                if not 200 <= response.status_code < 300:
                    raise await self._status_error(response)
                content_type = response.headers.get("content-type", "").lower()
                if content_type.startswith("application/json"):
                    self._json = bytearray()
        except BaseException:
            await self._release()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self._release(graceful=exc_type is None and self._finished and not self._cancelled)

    async def _release(self, *, graceful: bool = False) -> None:
        """Detach from the cancellation and close the response.

        After a stream that finished normally (``graceful``), the rest of the body (the
        end of the chunked encoding, usually already on its way) is read for at most
        a second and 64 KiB, so the connection goes back to the pool for reuse. Every
        other exit stops an unfinished body read by cancelling it, shielded and bounded:
        the pending read raises ``Cancelled`` inside httpcore, which unwinds httpx's
        nested async generators (none is abandoned mid-iteration) and discards the
        connection; data that had already arrived in full still ends the body normally.
        """
        if self._remove_callback is not None:
            self._remove_callback()
            self._remove_callback = None
        response, self._response = self._response, None
        chunks, self._chunks = self._chunks, None
        if response is None:
            return
        try:
            if graceful and chunks is not None:
                drained = 0
                with trio.move_on_after(_DRAIN_SECONDS) as drain:
                    with contextlib.suppress(httpx.HTTPError):
                        async for piece in chunks:
                            drained += len(piece)
                            if drained > _DRAIN_BYTES:
                                drain.cancel()
        finally:
            with trio.CancelScope(shield=True, relative_deadline=_CLOSE_TIMEOUT):
                if chunks is not None:
                    with trio.CancelScope() as stop:
                        stop.cancel()
                        with contextlib.suppress(httpx.HTTPError):
                            async for _ in chunks:
                                pass
                with contextlib.suppress(httpx.HTTPError):
                    await response.aclose()

    async def _status_error(self, response: httpx.Response) -> HTTPStatusError:
        data = bytearray()
        while len(data) < _ERROR_BODY_BYTES:
            try:
                chunk = await self._read()
            except OpenAIError:
                break
            if not chunk:
                break
            data += chunk
        body = data[:_ERROR_BODY_BYTES].decode("utf-8", "replace")
        excerpt = body[:ERROR_EXCERPT]
        message = server_message(body)
        status = response.status_code
        if status == 429:
            return RateLimited(
                status, excerpt, message, retry_after=retry_after_seconds(response.headers)
            )
        return HTTPStatusError(status, excerpt, message, hint=_status_hint(status, self._model))

    # -- reading ----------------------------------------------------------------------------
    async def _read(self) -> bytes | None:
        """The next piece of the body; ``None`` at its end, ``b""`` when the stream's
        cancellation stopped the read."""
        response = self._response
        if response is None:
            return None
        if self._chunks is None:
            self._chunks = response.aiter_bytes()
        model = self._model
        stall = model._stall
        if self._cancellation is None:
            # Nothing can stop a read in progress but Trio's own scopes, and the request's
            # httpx read timeout (the stall timeout) already bounds every socket read
            # (ReadTimeout -> StreamStalled): no scope of our own, whose entry and exit
            # were the costliest part of a read (issue 33's SSE row).
            return await self._read_unscoped(stall)
        with trio.move_on_after(math.inf if stall is None else stall) as scope:
            self._scope = scope
            if self._cancelled:
                scope.cancel()
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                return None
            except httpx.HTTPError as exc:
                raise _transport_error(exc, model._endpoint, stall, "mid-stream") from exc
            finally:
                self._scope = None
            self._received += len(chunk)
            if self._received > model._max_response:
                raise ResponseTooLarge("max_response_bytes", model._max_response, self._received)
            return chunk
        if self._cancelled:
            return b""
        assert stall is not None
        raise StreamStalled(
            f"{_shown_url(model._endpoint)} sent nothing for {stall:g} s mid-stream",
            timeout=stall,
        )

    async def _read_unscoped(self, stall: float | None) -> bytes | None:
        assert self._chunks is not None
        model = self._model
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            return None
        except httpx.HTTPError as exc:
            raise _transport_error(exc, model._endpoint, stall, "mid-stream") from exc
        self._received += len(chunk)
        if self._received > model._max_response:
            raise ResponseTooLarge("max_response_bytes", model._max_response, self._received)
        return chunk

    def __aiter__(self) -> OpenAIStream:
        return self

    async def __anext__(self) -> GenerationEvent:
        """The next event. Checkpoints at each network read (events that arrived
        together are returned without one)."""
        ready = self._ready
        while not ready:
            if self._finished:
                raise StopAsyncIteration
            if not self._entered:
                raise OpenAIError("enter the stream ('async with') before iterating it")
            if self._cancelled:
                self._complete(cancelled=True)
                break
            chunk = await self._read()
            if chunk is None:
                self._end_of_body()
            elif chunk:
                self._absorb(chunk)
        event = ready.popleft()
        if isinstance(event, Completed) and self._assembler.usage is None:
            event = Completed(await self._estimated(event.response))
        return event

    async def _estimated(self, response: Response) -> Response:
        """The response with usage counted here (the server reported none)."""
        usage = None
        if not self._cancelled and response.finish_reason != "cancelled":
            # The stream's cancellation stops a count in progress, like a read.
            with trio.CancelScope() as scope:
                self._scope = scope
                try:
                    usage = await count_usage(self._request, response, self._model._token_counter)
                finally:
                    self._scope = None
        if usage is None:
            usage = estimate_usage(self._request, response)
        return attrs.evolve(response, usage=usage)

    def _absorb(self, chunk: bytes) -> bool:
        """Take in one piece of the body; True when the stream has finished."""
        if self._json is not None:
            self._json += chunk
            return False
        ready = self._ready
        feed = self._assembler.feed_data
        for event in self._sse.feed(chunk):
            if self._finished:
                return True
            data = event.data
            if data[:1] == "{" and event.event == "message":  # a chunk: the common event
                ready.extend(feed(data))
            elif self._dispatch(event):
                return True
        return False

    def _dispatch(self, event: SSEEvent) -> bool:
        """Handle one SSE event; True when it finished the stream."""
        if self._finished:
            return True
        if event.event == "error":
            raise StreamError(server_message(event.data) or event.data[:ERROR_EXCERPT])
        if event.data.strip() == "[DONE]":
            self._complete()
            return True
        self._ready.extend(self._assembler.feed_data(event.data))
        return False

    def _end_of_body(self) -> bool:
        if self._json is not None:
            try:
                body = json.loads(self._json)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
                raise MalformedChunk(
                    "the JSON response is not valid JSON",
                    excerpt=self._json[:500].decode("utf-8", "replace"),
                ) from exc
            self._ready.extend(self._assembler.feed_completion(body))
            self._complete()
            return True
        if any(self._dispatch(event) for event in self._sse.finish()):
            return True
        if self._assembler.finish_reason is not None:
            self._complete()  # no [DONE], but the completion had finished
            return True
        raise Disconnected(
            f"{_shown_url(self._model._endpoint)} ended the stream before it finished "
            "(no finish_reason and no data: [DONE])"
        )

    def _complete(self, *, cancelled: bool = False) -> None:
        self._finished = True
        response = self._assembler.response(cancelled=cancelled)
        check_forced_call(requested_choice(self._request), response)  # not an empty answer
        self._ready.append(Completed(response))
