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
    AsyncIterator,
    Awaitable,
    Callable,
    MutableMapping,
)
from typing import Any, Final

from emelex.service._errors import InvalidRequest, RequestTooLarge

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


async def rest_of_body(first: bytes, more: bool, receive: Receive) -> AsyncGenerator[bytes, None]:
    """The resource: ``first``, then each further body chunk as it arrives."""
    if first:
        yield first
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequest("the client left in the middle of the resource")
        more = bool(message.get("more_body", False))
        chunk = message.get("body", b"")
        if chunk:
            yield chunk


async def request_then_resource(
    head: bytes, resource: AsyncIterable[bytes]
) -> AsyncIterator[bytes]:
    """The client's body: the request line, then the resource's chunks."""
    yield head
    async for chunk in resource:
        yield chunk
