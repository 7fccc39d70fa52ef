"""Operations that carry a binary resource (``execute``'s attachments) in one request.

The body is the request contract as compact JSON, one newline (compact JSON never holds
a raw newline: ``json.dumps`` escapes it), then the resource's bytes, streamed to the Host
as they arrive (the Host checks each attachment's size and digest while it reads, and
bounds the total). Such a request says so with :data:`RESOURCE_TYPE`.
"""

from __future__ import annotations

from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    Awaitable,
    Callable,
    MutableMapping,
)
from typing import Any, Final

import trio

from emelex.service._errors import InvalidRequest, RequestTimedOut, RequestTooLarge

#: The content type of a request followed by its binary resource.
RESOURCE_TYPE: Final = "application/vnd.emelex.request+resource"

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]


async def read_head(receive: Receive, limit: int) -> tuple[bytes, bytes, bool]:
    """The request before the first newline (at most ``limit`` bytes), the resource
    bytes already received after it, and whether more body follows."""
    buffer = bytearray()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("the client left before sending its request")
        buffer += message.get("body", b"")
        more = bool(message.get("more_body", False))
        index = buffer.find(b"\n")
        if 0 <= index <= limit:
            return bytes(buffer[:index]), bytes(buffer[index + 1 :]), more
        if len(buffer) > limit:
            raise RequestTooLarge(f"the request before its resource exceeds {limit} bytes")
        if not more:
            raise InvalidRequest("a request with a resource ends its JSON with a newline")


class ResourceBody:
    """The resource part of one request body, read as it arrives.

    Each chunk must arrive within ``seconds`` of the previous one (a body announced and
    never sent would hold its connection's slot forever). When the Host refuses the
    request before the resource ended, :meth:`discard` reads the rest so the client,
    still sending, gets the typed answer rather than a stalled write."""

    def __init__(self, first: bytes, more: bool, receive: Receive, seconds: float) -> None:
        self._first = first
        self._receive = receive
        self._seconds = seconds
        #: Whether body bytes remain unread.
        self.more = more

    async def _next(self) -> bytes:
        with trio.move_on_after(self._seconds):
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.more = False
                raise InvalidRequest("the client left in the middle of the resource")
            self.more = bool(message.get("more_body", False))
            chunk: bytes = message.get("body", b"")
            return chunk
        raise RequestTimedOut("the request's resource did not arrive in time")

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        """The resource: the bytes that came with the request, then each further chunk."""
        first, self._first = self._first, b""
        if first:
            yield first
        while self.more:
            chunk = await self._next()
            if chunk:
                yield chunk

    async def discard(self, limit: int) -> bool:
        """Read and drop what remains, at most ``limit`` bytes; whether the body ended
        (False: the connection must close, its remaining bytes unread). Never raises for
        the client's faults: the answer to the request is already decided."""
        dropped = 0
        try:
            while self.more and dropped <= limit:
                dropped += len(await self._next())
        except (InvalidRequest, RequestTimedOut):
            return False
        return not self.more


class RequestWithResource:
    """The client's body: the request line, then the resource, as an async iterator that
    is not a generator. When the Host answers before the whole resource was sent (a
    refusal) and closes the connection, the HTTP client stops iterating part way; a
    generator left so would be finalized by the garbage collector, this one needs no
    finalizing, and :meth:`aclose` closes the caller's resource iterator at once."""

    def __init__(self, head: bytes, resource: bytes | AsyncIterable[bytes], chunk: int) -> None:
        self._head: bytes | None = head
        self._data = memoryview(resource) if isinstance(resource, bytes) else None
        self._offset = 0
        self._chunk = chunk
        self._source = None if isinstance(resource, bytes) else aiter(resource)

    def __aiter__(self) -> RequestWithResource:
        return self

    async def __anext__(self) -> bytes:
        if self._head is not None:
            head, self._head = self._head, None
            return head
        if self._data is not None:
            if self._offset >= len(self._data):
                raise StopAsyncIteration
            start, self._offset = self._offset, self._offset + self._chunk
            return bytes(self._data[start : self._offset])
        assert self._source is not None
        return await anext(self._source)

    async def aclose(self) -> None:
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()
