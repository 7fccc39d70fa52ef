"""The route table, its generated document, and HostClient's likeness to Host."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import trio

from emelex.contracts import SendRequest, WatchRequest, to_wire
from emelex.service import Host, HostClient
from emelex.service._api import HostAPI
from emelex.service.transport._route_doc import route_document
from emelex.service.transport._routes import BY_METHOD, BY_NAME, ROUTES
from emelex.testing import Say
from tests.service.conftest import served
from tests.service.test_host import agent


def test_route_names_and_paths_follow_the_protocol() -> None:
    assert len(BY_NAME) == len(ROUTES)
    for route in ROUTES:
        assert route.path == f"/v1/{route.kind}/{route.name}"
        assert route.name[0].islower() and "_" not in route.name
    documented = {"createSession", "listSessions", "send", "stop", "queue", "respond"}
    assert documented <= set(BY_NAME)
    assert {r.name for r in ROUTES if r.kind == "sub"} >= {"watch", "watchDiagnostics"}


def _operations() -> list[str]:
    return [n for n in vars(HostAPI) if not n.startswith("_") and callable(getattr(HostAPI, n))]


def test_every_hostapi_operation_has_a_route_and_every_route_an_operation() -> None:
    operations = _operations()
    assert {r.method for r in ROUTES} == set(operations)
    assert {r.name for r in BY_METHOD["watch"]} == {"watch", "watchLive"}
    for name in operations:
        assert all(len(BY_METHOD[n]) == 1 for n in operations if n != "watch"), name


def test_host_and_client_take_the_hostapi_arguments() -> None:
    """One declaration: the protocol's signature is the Host's and the client's."""
    for name in _operations():
        declared = inspect.signature(getattr(HostAPI, name))
        for implementation in (Host, HostClient):
            actual = inspect.signature(getattr(implementation, name))
            assert [(p.name, p.kind, p.default) for p in actual.parameters.values()] == [
                (p.name, p.kind, p.default) for p in declared.parameters.values()
            ], (implementation.__name__, name)


def test_hosts_and_clients_are_hostapis() -> None:
    # Checked by mypy as well: both assignments type-check only if they implement it.
    def accepts(api: HostAPI) -> HostAPI:
        return api

    assert accepts is not None
    for name in _operations():
        # Declared in the class itself, derived from the route: no hand-written copy.
        assert HostClient.__dict__[name].__name__ == name
        assert "over the wire" in (HostClient.__dict__[name].__doc__ or "")


def _typed(host: Host, client: HostClient) -> tuple[HostAPI, HostAPI]:
    return host, client


def test_the_route_document_refers_only_to_declared_schemas() -> None:
    document = route_document()
    assert document["openapi"].startswith("3.1")
    assert set(document["paths"]) == {route.path for route in ROUTES}
    schemas = document["components"]["schemas"]
    text = json.dumps(document)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    send = document["paths"]["/v1/op/send"]["post"]
    schema = {**send["requestBody"]["content"]["application/json"]["schema"], **document}
    wire = to_wire(SendRequest(session_id="s-1", text="hi", operation="o-1"))  # type: ignore[arg-type]
    jsonschema.Draft202012Validator(schema).validate(wire)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate({**wire, "extra": 1})
    watch = document["paths"]["/v1/sub/watch"]["get"]["x-emelex-subscription"]
    schema = {**watch["request"], **document}
    jsonschema.Draft202012Validator(schema).validate(
        to_wire(WatchRequest(session_id="s-1", after=None))  # type: ignore[arg-type]
    )


async def test_hello_and_routes_over_the_socket(tmp_path: Path) -> None:
    async with served(tmp_path, {"helper": agent()}), HostClient.connect(root=tmp_path) as client:
        assert (await client.hello()).wire_version == 1
        assert (await client.routes()) == route_document()


class _LosesFirstAnswer(httpx.AsyncBaseTransport):
    """Forwards each request; the first answer is lost after the Host applied it."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.sent: list[bytes] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent.append(request.content)
        response = await self.inner.handle_async_request(request)
        await response.aread()
        if len(self.sent) == 1:
            raise httpx.ReadError("the connection dropped before the answer arrived")
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_a_lost_answer_is_retried_with_the_same_operation(tmp_path: Path) -> None:
    async with served(tmp_path, {"helper": agent([Say("once")])}) as serving:
        async with HostClient.connect(root=tmp_path) as plain:
            session = (await plain.create_session("helper", tmp_path, operation="c")).session
            lossy = _LosesFirstAnswer(httpx.AsyncHTTPTransport(uds=str(serving.socket_path)))

            async def no_stream() -> Any:
                raise AssertionError("no subscription here")

            async with httpx.AsyncClient(transport=lossy, base_url="http://emelex") as http:
                client = HostClient(http, no_stream, authority="emelex", token=None)
                with trio.fail_after(30):
                    receipt = await client.send(session.id, "hello", operation="send-1")
            assert len(lossy.sent) == 2 and lossy.sent[0] == lossy.sent[1]
            queue = await plain.queue(session.id)
            history = await plain.history(session.id)
            admitted = [e for e in queue.entries if e.operation == "send-1"]
            users = [r for r in history.rows if r.role == "user"]
            # Applied once: one invocation, whatever state it reached.
            assert len(admitted) + len(users) >= 1
            assert len(admitted) <= 1 and len(users) <= 1
            assert receipt == await plain.send(session.id, "hello", operation="send-1")


async def test_batched_subscriptions_send_lists_of_updates(tmp_path: Path) -> None:
    from emelex.service.transport._websocket import WebSocket

    async with served(tmp_path, {"helper": agent()}) as serving:
        async with HostClient.connect(root=tmp_path) as client:
            session_id = (await client.create_session("helper", tmp_path, operation="c")).session.id
        frames: list[dict[str, Any]] = []
        for target in ("/v1/sub/watch", "/v1/sub/watch?batch=1"):
            stream = await trio.open_unix_socket(str(serving.socket_path))
            socket = await WebSocket.open(
                stream, host="x", target=target, headers=[], max_message=1 << 20
            )
            try:
                await socket.send_text(json.dumps({"sessionId": session_id, "after": None}))
                with trio.fail_after(30):
                    text = await socket.receive_text()
                assert text is not None
                frames.append(json.loads(text))
            finally:
                await socket.aclose()
        single, batched = frames
        assert single["update"]["kind"] == "queue"
        assert [u["kind"] for u in batched["updates"]][:1] == ["queue"]
