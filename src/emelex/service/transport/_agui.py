"""AG-UI over HTTP: ``POST /ag-ui/run`` answers a run as a Server-Sent Events stream.

A thin driver of :class:`~emelex.service.HostAPI` (docs/service/ag-ui.md): the run's last
message decides the one operation it makes (a user message is a ``send``; a tool message
answering an ``emelex_approval`` call is a ``respond``), then the session's live watch is
fed to the pure :class:`RunMapper` (``_agui_events``) and its events are written as they
come. The thread is the session, the run follows one invocation. Operation references
are derived from the thread and run ids, so a retried run makes no second send.

Every write carries the events of one watch update; the last event of each write has an
SSE ``id``, the cursor a client sends back as ``Last-Event-ID`` to resume that run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

import trio

from emelex.contracts import (
    ApproveResponse,
    DenyResponse,
    InteractionResponse,
    Position,
    QueueChanged,
    RowsPublished,
    WatchEnded,
)
from emelex.service._errors import HostClosed, InteractionSettled, InvalidRequest, UnknownRoute
from emelex.service.transport._agui_events import APPROVAL_TOOL, Event, RunMapper
from emelex.service.transport._json import dump, parse_object

if TYPE_CHECKING:
    from emelex.service._api import HostAPI

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The one AG-UI route (with ``serve --ag-ui``).
RUN_PATH: Final = "/ag-ui/run"
#: Rows per page when a run replays an invocation that ended before its watch began.
_PAGE: Final = 100
#: An id a client chose (thread, run, tool call) is at most this long.
_MAX_ID: Final = 256
#: A denial's reason, as the Host's contracts bound it.
_MAX_REASON: Final = 4096

_log = logging.getLogger("emelex.service")


def _ref(*parts: str) -> str:
    """An operation reference for client-chosen ids (any text) within the wire's rules."""
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:48]
    return f"ag-ui.{digest}"


def _id(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise InvalidRequest(f"RunAgentInput.{key} must be a string of 1 to {_MAX_ID} characters")
    return value


def _content(message: dict[str, Any]) -> str:
    """A message's text: a string, or the text parts of a list of parts."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
        return "".join(t for t in texts if isinstance(t, str))
    raise InvalidRequest("a message's content must be a string or a list of parts")


def _answer(text: str) -> InteractionResponse:
    """``{"approved": true}`` or ``{"approved": false, "reason": "..."}``."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not isinstance(value.get("approved"), bool):
        raise InvalidRequest('an approval answer is {"approved": true|false, "reason"?: "..."}')
    if value["approved"]:
        return ApproveResponse()
    reason = value.get("reason")
    if not isinstance(reason, str) or not reason:
        reason = "denied by the user"
    return DenyResponse(reason=reason[:_MAX_REASON])


def _approval_cursor(messages: list[Any], interaction_id: str) -> str | None:
    """The resume cursor the approval call's own arguments carry (the client sends the
    call back in its messages), or None."""
    for message in messages:
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for call in message.get("toolCalls") or ():
            if not isinstance(call, dict) or call.get("id") != interaction_id:
                continue
            function = call.get("function")
            if not isinstance(function, dict) or function.get("name") != APPROVAL_TOOL:
                return None
            with contextlib.suppress(ValueError, TypeError):
                resume = json.loads(function.get("arguments", ""))["resume"]
                return resume if isinstance(resume, str) else None
    return None


async def _begin(
    host: HostAPI, data: dict[str, Any], last_event_id: str | None, *, draining: bool
) -> RunMapper:
    """The run's one operation on the Host, and the mapper that follows it. A draining
    Host admits no new work (a send) but still takes answers, like its wire routes."""
    thread_id, run_id = _id(data, "threadId"), _id(data, "runId")
    if last_event_id is not None:
        mapper = RunMapper.resume(last_event_id, thread_id=thread_id, run_id=run_id)
        await host.queue(thread_id)  # the thread must exist (UnknownSession otherwise)
        return mapper
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        raise InvalidRequest("RunAgentInput.messages must end with the message to act on")
    last = messages[-1]
    if last.get("role") == "user":
        if draining:
            raise HostClosed("the Host is draining: it admits no new work")
        text = _content(last)
        receipt = await host.send(thread_id, text, operation=_ref(thread_id, run_id))
        start = Position(source_sequence=receipt.receipt.sequence, item_index=0)
        return RunMapper(thread_id, run_id, receipt.invocation_id, text=text, after=start)
    if last.get("role") == "tool":
        return await _respond(host, thread_id, run_id, messages)
    raise InvalidRequest("the last message must be a user message or an approval's answer")


async def _respond(host: HostAPI, thread_id: str, run_id: str, messages: list[Any]) -> RunMapper:
    """Answer the approvals the trailing tool messages answer; follow their invocation."""
    answers = []
    for message in reversed(messages):
        if not isinstance(message, dict) or message.get("role") != "tool":
            break
        answers.append(message)
    mapper: RunMapper | None = None
    for message in reversed(answers):
        interaction_id = _id(message, "toolCallId")
        interaction = await host.interaction(thread_id, interaction_id)
        response = _answer(_content(message))
        operation = _ref(thread_id, run_id, interaction_id)
        with contextlib.suppress(InteractionSettled):  # answered already: follow it
            await host.respond(thread_id, interaction_id, response, operation=operation)
        if mapper is not None:
            continue
        cursor = _approval_cursor(messages, interaction_id)
        if cursor is not None:
            mapper = RunMapper.resume(cursor, thread_id=thread_id, run_id=run_id)
            if mapper.invocation_id == interaction.invocation_id:
                continue
        start = Position(source_sequence=interaction.requested_sequence, item_index=0)
        mapper = RunMapper(
            thread_id,
            run_id,
            interaction.invocation_id,
            turn_id=interaction.turn_id,
            after=start,
            calls=[interaction.tool_call.id],
            approvals=[interaction.id],
        )
    assert mapper is not None  # the last message is a tool message
    return mapper


Emit = Callable[[list[Event]], Awaitable[None]]


async def follow(host: HostAPI, session_id: str, mapper: RunMapper, emit: Emit) -> None:
    """Feed the session's live watch to ``mapper`` until its run ends; a lagged watch
    is watched again from its cursor, and an invocation that ended before the watch
    began is replayed from history (its rows, then the queue that ended it)."""
    while not mapper.finished:
        async with host.watch(session_id, after=mapper.after, live=True) as updates:
            first = True
            async for update in updates:
                if first and isinstance(update, QueueChanged):
                    entries = update.queue.entries
                    if all(e.invocation_id != mapper.invocation_id for e in entries):
                        mapper.observe(update.queue)
                        await _replay(host, session_id, mapper, emit)
                        await emit(mapper.feed(update))
                        return
                first = False
                await emit(mapper.feed(update))
                if mapper.finished or isinstance(update, WatchEnded):
                    break
            else:
                await emit(mapper.failed("the watch ended", "closed"))


async def _replay(host: HostAPI, session_id: str, mapper: RunMapper, emit: Emit) -> None:
    through: int | None = None
    while True:
        page = await host.history(session_id, through=through, after=mapper.after, limit=_PAGE)
        through = page.through
        if page.rows:
            rows = RowsPublished(through=page.through, rows=page.rows, next_after=page.next_after)
            await emit(mapper.feed(rows))
        if page.next_after is None:
            return


class EventStream:
    """The SSE response of one run: one write per batch of events, each bounded in
    time (a client that stops reading ends its run, never the Host's)."""

    def __init__(self, send: Send, mapper: RunMapper, write_seconds: float) -> None:
        self._send = send
        self._mapper = mapper
        self._write_seconds = write_seconds

    async def start(self) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]
        await self._write({"type": "http.response.start", "status": 200, "headers": headers})

    async def emit(self, events: list[Event]) -> None:
        if not events:
            return
        frames = [f"data: {dump(event).decode()}\n" for event in events]
        frames[-1] = f"id: {self._mapper.cursor()}\n{frames[-1]}"
        body = "\n".join(frames) + "\n"
        await self._write({"type": "http.response.body", "body": body.encode(), "more_body": True})

    async def end(self) -> None:
        await self._write({"type": "http.response.body", "body": b"", "more_body": False})

    async def _write(self, message: Message) -> None:
        with trio.fail_after(self._write_seconds):
            await self._send(message)


async def serve_run(
    host: HostAPI,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    body: bytes,
    max_bytes: int,
    write_seconds: float,
    draining: bool = False,
) -> None:
    """Answer one ``POST /ag-ui/run`` whose ``body`` was read (within the limits).
    Errors before the stream starts raise (the caller answers them as JSON); after it,
    they end the run with ``RUN_ERROR``."""
    if scope["path"] != RUN_PATH:
        raise UnknownRoute(f"no AG-UI route at {scope['path']}")
    if scope["method"] != "POST":
        raise InvalidRequest(f"{RUN_PATH} takes POST, not {scope['method']}")
    data = parse_object(body, max_bytes=max_bytes)
    last_event_id = _header(scope, b"last-event-id")
    mapper = await _begin(host, data, last_event_id, draining=draining)
    stream = EventStream(send, mapper, write_seconds)
    try:
        await stream.start()
    except trio.TooSlowError:
        return  # the client reads nothing, not even the answer's head
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_until_disconnect, receive, nursery.cancel_scope)
        try:
            if last_event_id is None:
                await stream.emit(mapper.started())
            await follow(host, mapper.thread_id, mapper, stream.emit)
        except Exception as exc:  # the stream has begun: the run ends in error
            if not isinstance(exc, trio.TooSlowError):
                _log.info("AG-UI run %s ended in error: %s", mapper.run_id, exc)
                with contextlib.suppress(Exception):
                    await stream.emit(mapper.failed(str(exc)[:4096], type(exc).__name__))
        nursery.cancel_scope.cancel()
    with contextlib.suppress(Exception):
        await stream.end()


async def _until_disconnect(receive: Receive, scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1").strip() or None
    return None
