"""AG-UI on a served Host (``serve --ag-ui``): the real ``@ag-ui/client`` (npm, run by
node) drives a tool round with an approval and the event sequence is checked exactly;
raw SSE checks the cursor (a reconnect resumes without duplicates) and the route's
authentication.

The client is installed from the npm registry into a cache folder outside the
repository. Without node or npm the client test is skipped with the reason, except in
CI (``CI=true``), where it fails like the browser tests do.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
import trio

from emelex.agent import DenyAll
from emelex.app import Agent
from emelex.service import Host, HostClient
from emelex.service.transport._http import HostApp
from emelex.service.transport._serve import Serving
from emelex.testing import Call, Fail, Say, ScriptedModel, Think, Wait
from emelex.tools import tool
from tests.service.conftest import served

CLIENT_VERSION = "1.0.0"
SCRIPT = Path(__file__).with_name("agui_client.cjs")
#: The most output the client script may print (it prints one JSON document).
MAX_OUTPUT = 1024 * 1024
NOTES: list[str] = []


@tool(needs_approval=True)
async def note(text: str) -> str:
    """Write a note down.

    Args:
        text: What to note.
    """
    NOTES.append(text)
    return f"noted {text}"


def _agent(*second_round: Any) -> Agent:
    rounds = [[Call("note", {"text": "milk"})], list(second_round)]
    builder = Agent.builder().name("helper").instructions("Take notes.").tool(note)
    return builder.model(ScriptedModel(rounds)).approver(DenyAll()).build()


def _unavailable(reason: str) -> NoReturn:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def client_modules() -> Path:
    """A folder whose node_modules holds @ag-ui/client, installed once per machine."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        _unavailable("node and npm are needed for the AG-UI client test")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    folder = cache / "emelex-tests" / f"ag-ui-client-{CLIENT_VERSION}"
    if not (folder / "node_modules" / "@ag-ui" / "client" / "package.json").is_file():
        folder.mkdir(parents=True, exist_ok=True)
        command = [npm, "install", "--no-audit", "--no-fund", "--no-save"]
        try:
            subprocess.run(
                [*command, "--prefix", str(folder), f"@ag-ui/client@{CLIENT_VERSION}"],
                check=True,
                capture_output=True,
                timeout=300,
            )
        except (subprocess.SubprocessError, OSError) as exc:
            _unavailable(f"npm could not install @ag-ui/client from the registry: {exc}")
    return folder / "node_modules"


@asynccontextmanager
async def _host(root: Path, agent: Agent) -> AsyncIterator[tuple[Serving, str, str]]:
    """A served Host with AG-UI on, its token, and one session (the thread)."""
    NOTES.clear()
    (root / "work").mkdir(parents=True)
    async with served(root, {"helper": agent}, tcp=True, ag_ui=True) as serving:
        assert serving.token_path is not None
        token = serving.token_path.read_text().strip()
        async with HostClient.connect(root=root) as client:
            created = await client.create_session("helper", root / "work", operation="c")
        yield serving, token, created.session.id


async def _run_node(
    arguments: list[str], *, script: Path = SCRIPT, env: dict[str, str] | None = None
) -> bytes:
    """Run a client script; its output is read within MAX_OUTPUT bytes and 60 s."""
    node = shutil.which("node")
    assert node is not None
    output: dict[str, bytes] = {}
    process = await trio.lowlevel.open_process(
        [node, str(script), *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=None if env is None else {**os.environ, **env},
    )
    try:
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                assert process.stdout is not None and process.stderr is not None
                nursery.start_soon(_read_bounded, process.stdout, output, "out")
                nursery.start_soon(_read_bounded, process.stderr, output, "err")
            await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            with trio.CancelScope(shield=True):
                await process.wait()
    assert process.returncode == 0, output["err"].decode(errors="replace")
    return output["out"]


async def _read_bounded(stream: trio.abc.ReceiveStream, into: dict[str, bytes], name: str) -> None:
    chunks: list[bytes] = []
    size = 0
    while chunk := await stream.receive_some(65536):
        size += len(chunk)
        assert size <= MAX_OUTPUT, "the client printed more than expected"
        chunks.append(bytes(chunk))
    into[name] = b"".join(chunks)


class Names:
    """The run's ids (UUIDv7, different each time) as stable placeholders."""

    def __init__(self, **known: str) -> None:
        self._names = {value: f"<{key}>" for key, value in known.items()}

    def rewrite(self, text: str) -> str:
        for value, name in sorted(self._names.items(), key=lambda item: -len(item[0])):
            text = text.replace(value, name)
        return text


def _line(event: dict[str, Any], names: Names) -> str:
    """One event as a short, stable line."""
    kind = event["type"]
    if kind in ("STATE_SNAPSHOT", "STATE_DELTA"):
        body = event.get("snapshot", event.get("delta"))
        return f"{kind} {names.rewrite(json.dumps(_state_shape(body)))}"
    if kind == "TOOL_CALL_ARGS":
        arguments = json.loads(event["delta"])
        if "resume" in arguments:
            arguments["resume"] = "<cursor>"
        detail = {"toolCallId": event["toolCallId"], "args": arguments}
        return f"{kind} {names.rewrite(json.dumps(detail))}"
    detail = {k: v for k, v in event.items() if k not in ("type", "timestamp", "rawEvent")}
    return f"{kind} {names.rewrite(json.dumps(detail))}"


def _state_shape(value: Any) -> Any:
    """State with its ids kept (rewritten later) and the Host's sequences left out."""
    if isinstance(value, dict):
        drop = {"admittedSequence", "requestedSequence", "sessionId", "operation"}
        return {k: _state_shape(v) for k, v in value.items() if k not in drop}
    if isinstance(value, list):
        return [_state_shape(v) for v in value]
    return value


async def test_ag_ui_client_runs_a_tool_round_with_an_approval(
    tmp_path: Path, client_modules: Path
) -> None:
    # The wait lets the answering run's watch begin before the answer streams.
    agent = _agent(Wait(1.0), Think("Noted."), Say("Done."))
    async with _host(tmp_path / "root", agent) as (serving, token, thread):
        assert serving.url is not None
        printed = await _run_node([str(client_modules), serving.url, token, thread])
    result = json.loads(printed)
    assert NOTES == ["milk"]
    first, second = result["runs"]
    names = Names(thread=thread, **_ids(first))
    transcript = [[_line(e, names) for e in run] for run in (first, second)]
    assert transcript == EXPECTED, json.dumps(transcript, indent=1)
    # The client's own conversation holds the round in order.
    roles = [(m["role"], m.get("content"), m["id"]) for m in result["messages"]]
    assert [r[:2] for r in roles] == [
        ("user", "Note milk."),
        ("assistant", None),  # the proposed note call
        ("tool", "noted milk"),
        ("assistant", None),  # the approval call
        ("tool", '{"approved":true}'),
        ("reasoning", "Noted."),
        ("assistant", "Done."),
    ]


def _ids(events: list[dict[str, Any]]) -> dict[str, str]:
    """The invocation's, the interaction's, the turn's and the call's ids, as the first
    run's state shows them."""
    snapshot = next(e["snapshot"] for e in events if e["type"] == "STATE_SNAPSHOT")
    (interaction,) = snapshot["interactions"]
    return {
        "invocation": snapshot["queue"][0]["invocationId"],
        "approval": interaction["id"],
        "turn": interaction["turnId"],
        "call": interaction["toolCall"]["id"],
    }


EXPECTED = [
    [
        'RUN_STARTED {"threadId": "<thread>", "runId": "run-1", "protocolVersion": "1.0"}',
        'STATE_SNAPSHOT {"queue": [{"invocationId": "<invocation>", "work": "send", "state":'
        ' "running"}], "interactions": [{"id": "<approval>", "invocationId": "<invocation>",'
        ' "turnId": "<turn>", "toolCall": {"id": "<call>", "name": "note", "arguments":'
        ' {"text": "milk"}}, "reason": "run the tool \'note\' with arguments {\\"text\\":'
        ' \\"milk\\"}", "state": "pending", "resolution": null}]}',
        'TOOL_CALL_START {"toolCallId": "<call>", "toolCallName": "note"}',
        'TOOL_CALL_ARGS {"toolCallId": "<call>", "args": {"text": "milk"}}',
        'TOOL_CALL_END {"toolCallId": "<call>"}',
        'TOOL_CALL_START {"toolCallId": "<approval>", "toolCallName": "emelex_approval"}',
        'TOOL_CALL_ARGS {"toolCallId": "<approval>", "args": {"interactionId": "<approval>",'
        ' "toolCallId": "<call>", "tool": "note", "arguments": {"text": "milk"}, "reason":'
        ' "run the tool \'note\' with arguments {\\"text\\": \\"milk\\"}", "resume": "<cursor>"}}',
        'TOOL_CALL_END {"toolCallId": "<approval>"}',
        'RUN_FINISHED {"threadId": "<thread>", "runId": "run-1", "outcome": {"type": "success",'
        ' "pendingToolCallIds": ["<approval>"]}}',
    ],
    [
        'RUN_STARTED {"threadId": "<thread>", "runId": "run-2", "protocolVersion": "1.0"}',
        'STATE_SNAPSHOT {"queue": [{"invocationId": "<invocation>", "work": "send", "state":'
        ' "running"}], "interactions": []}',
        'REASONING_START {"messageId": "<invocation>:1:reasoning"}',
        'REASONING_MESSAGE_START {"messageId": "<invocation>:1:reasoning", "role": "reasoning"}',
        'REASONING_MESSAGE_CONTENT {"messageId": "<invocation>:1:reasoning", "delta": "Noted."}',
        'REASONING_MESSAGE_END {"messageId": "<invocation>:1:reasoning"}',
        'REASONING_END {"messageId": "<invocation>:1:reasoning"}',
        'TEXT_MESSAGE_START {"messageId": "<invocation>:1", "role": "assistant"}',
        'TEXT_MESSAGE_CONTENT {"messageId": "<invocation>:1", "delta": "Done."}',
        'TEXT_MESSAGE_END {"messageId": "<invocation>:1"}',
        'TOOL_CALL_RESULT {"messageId": "<turn>:15.0", "toolCallId": "<call>", "content":'
        ' "noted milk", "role": "tool"}',
        'STATE_DELTA [{"op": "replace", "path": "/queue", "value": []}]',
        'RUN_FINISHED {"threadId": "<thread>", "runId": "run-2"}',
    ],
]


async def _sse(
    client: httpx.AsyncClient,
    body: dict[str, Any],
    *,
    last_id: str | None = None,
    stop: int = 0,
    events: list[dict[str, Any]] | None = None,
    answering: trio.Event | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """POST a run and read its events (into ``events``) and the last SSE id, leaving
    after ``stop`` events when it is positive; ``answering`` is set at the first text."""
    headers = {} if last_id is None else {"last-event-id": last_id}
    events = [] if events is None else events
    seen_id = last_id
    with trio.fail_after(30):
        async with client.stream("POST", "/ag-ui/run", json=body, headers=headers) as answer:
            assert answer.status_code == 200, await answer.aread()
            async for line in answer.aiter_lines():
                if line.startswith("id: "):
                    seen_id = line.removeprefix("id: ")
                elif line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    if answering is not None and events[-1]["type"] == "TEXT_MESSAGE_CONTENT":
                        answering.set()
                    if stop and len(events) >= stop:
                        break
    return events, seen_id


def _approval(events: list[dict[str, Any]]) -> tuple[str, str]:
    args = next(
        e for e in events if e["type"] == "TOOL_CALL_ARGS" and "interactionId" in e["delta"]
    )
    return args["toolCallId"], args["delta"]


async def test_the_pages_client_snippet_runs(tmp_path: Path, client_modules: Path) -> None:
    page = (Path(__file__).parents[2] / "docs" / "service" / "ag-ui.md").read_text()
    (snippet,) = re.findall(r"^```js\n(.*?)^```$", page, re.S | re.M)
    script = tmp_path / "approve.cjs"
    script.write_text(snippet)
    async with _host(tmp_path / "root", _agent(Say("Done."))) as (serving, token, thread):
        assert serving.url is not None
        # CommonJS require() also looks in NODE_PATH: the cached client stands in for
        # the reader's own `npm install`.
        modules = {"NODE_PATH": str(client_modules)}
        printed = await _run_node([serving.url, token, thread], script=script, env=modules)
    lines = printed.decode().splitlines()
    assert lines[0] == "RUN_STARTED" and lines.count("RUN_FINISHED") == 2
    assert 'approve note {"text":"milk"}?' in lines
    assert lines[-6:] == [
        "user: Note milk.",
        "assistant: ",  # the note call
        "tool: noted milk",
        "assistant: ",  # the approval call
        'tool: {"approved":true}',
        "assistant: Done.",
    ]
    assert NOTES == ["milk"]


# Leaving a streamed httpx response early leaves httpcore's body generators to the
# garbage collector (their warning is httpx's, not the Host's).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_reconnect_resumes_from_the_cursor_without_duplicates(tmp_path: Path) -> None:
    agent = _agent(Wait(0.5), Say("Done "), Wait(1.5), Say("and dusted."))
    async with _host(tmp_path / "root", agent) as (serving, token, thread):
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=str(serving.url), headers=headers) as client:
            ask = {"id": "u", "role": "user", "content": "Note milk."}
            first, _ = await _sse(client, {"threadId": thread, "runId": "r1", "messages": [ask]})
            asked, arguments = _approval(first)
            function = {"name": "emelex_approval", "arguments": arguments}
            call: dict[str, Any] = {"id": asked, "type": "function", "function": function}
            answer = {
                "id": "t",
                "role": "tool",
                "toolCallId": asked,
                "content": '{"approved": true}',
            }
            messages = [ask, {"id": "a", "role": "assistant", "toolCalls": [call]}, answer]
            body = {"threadId": thread, "runId": "r2", "messages": messages}
            # Leave once the first words arrived, then come back with the last id seen.
            before, cursor = await _sse(client, body, stop=4)
            after, _ = await _sse(client, body, last_id=cursor)
            # The same run retried without a cursor sends nothing twice: it follows
            # the same invocation (its rows are in history by now).
            again, _ = await _sse(client, body)
    assert NOTES == ["milk"]
    kinds = [e["type"] for e in before + after]
    assert kinds == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        # resumed: the state again (a snapshot resynchronises), then only what is new
        "STATE_SNAPSHOT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "TOOL_CALL_RESULT",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    text = "".join(e["delta"] for e in before + after if e["type"] == "TEXT_MESSAGE_CONTENT")
    assert text == "Done and dusted."
    assert [e["type"] for e in again] == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert again[4]["delta"] == "Done and dusted."


async def test_a_failed_turn_ends_its_run_with_run_error(tmp_path: Path) -> None:
    agent = Agent.builder().name("helper").instructions("Help.").approver(DenyAll())
    failing = agent.model(ScriptedModel([[Fail(RuntimeError("upstream broke"))]])).build()
    async with _host(tmp_path / "root", failing) as (serving, token, thread):
        headers = {"authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=str(serving.url), headers=headers) as client:
            ask = {"id": "u", "role": "user", "content": "Try."}
            events, _ = await _sse(client, {"threadId": thread, "runId": "r", "messages": [ask]})
    assert [e["type"] for e in events] == ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_ERROR"]
    assert events[-1]["code"] == "failed"
    assert events[1]["snapshot"] == {"queue": [], "interactions": []}


async def test_a_stopped_invocation_ends_its_run_cancelled(tmp_path: Path) -> None:
    agent = Agent.builder().name("helper").instructions("Help.").approver(DenyAll())
    slow = agent.model(ScriptedModel([[Say("Working"), Wait(3600)]])).build()
    async with _host(tmp_path / "root", slow) as (serving, token, thread):
        headers = {"authorization": f"Bearer {token}"}
        events: list[dict[str, Any]] = []
        ask = {"id": "u", "role": "user", "content": "Work."}
        body = {"threadId": thread, "runId": "r", "messages": [ask]}
        async with (
            httpx.AsyncClient(base_url=str(serving.url), headers=headers) as client,
            HostClient.connect(root=tmp_path / "root") as host,
            trio.open_nursery() as nursery,
        ):
            answering = trio.Event()
            run = functools.partial(_sse, client, body, events=events, answering=answering)
            nursery.start_soon(run)
            with trio.fail_after(30):
                await answering.wait()
            invocation = events[1]["snapshot"]["queue"][0]["invocationId"]
            await host.stop(thread, invocation, operation="stop-1")
    assert [e["type"] for e in events][-3:] == ["TEXT_MESSAGE_END", "STATE_DELTA", "RUN_FINISHED"]
    assert events[-1]["outcome"] == {"type": "cancelled"}


async def test_the_route_needs_the_flag_and_the_token(tmp_path: Path) -> None:
    body = {"threadId": "s-none", "runId": "r", "messages": [{"role": "user", "content": "x"}]}
    async with _host(tmp_path / "on", _agent(Say("ok"))) as (serving, token, _):
        async with httpx.AsyncClient(base_url=str(serving.url)) as client:
            refused = await client.post("/ag-ui/run", json=body)
            assert refused.status_code == 401
            assert refused.json()["error"]["type"] == "Unauthorized"
            headers = {"authorization": f"Bearer {token}"}
            unknown = await client.post("/ag-ui/run", json=body, headers=headers)
            assert unknown.status_code == 404
            assert unknown.json()["error"]["type"] == "UnknownSession"
            bad = await client.post("/ag-ui/run", json={"threadId": "s"}, headers=headers)
            assert bad.status_code == 400
    root = tmp_path / "off"
    root.mkdir()
    async with served(root, {"helper": _agent(Say("ok"))}, tcp=True) as serving:
        assert serving.token_path is not None
        headers = {"authorization": f"Bearer {serving.token_path.read_text().strip()}"}
        async with httpx.AsyncClient(base_url=str(serving.url), headers=headers) as client:
            assert (await client.post("/ag-ui/run", json=body)).status_code == 404


async def _asgi(app: HostApp, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One request straight to the ASGI app: its status and JSON answer."""
    scope = {"type": "http", "path": "/ag-ui/run", "method": "POST", "headers": []}
    sent: list[dict[str, Any]] = []
    requests = [{"type": "http.request", "body": json.dumps(body).encode(), "more_body": False}]

    async def receive() -> dict[str, Any]:
        if requests:
            return requests.pop()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    with trio.fail_after(10):
        await app(scope, receive, send)
    return sent[0]["status"], json.loads(sent[1]["body"])


async def test_a_draining_host_refuses_sends_and_takes_answers(tmp_path: Path) -> None:
    async with Host.open(tmp_path / "host", agents={"helper": _agent(Say("ok"))}) as host:
        (tmp_path / "work").mkdir()
        created = await host.create_session("helper", tmp_path / "work", operation="c")
        app = HostApp(host, token=None, ag_ui=True)
        app.draining = True
        thread = created.session.id
        send = {"threadId": thread, "runId": "r", "messages": [{"role": "user", "content": "x"}]}
        status, answer = await _asgi(app, send)
        assert (status, answer["error"]["type"]) == (503, "HostClosed")
        reply = {"role": "tool", "toolCallId": "ask-1", "content": '{"approved": true}'}
        status, answer = await _asgi(app, {"threadId": thread, "runId": "r", "messages": [reply]})
        # Past the drain check: the Host looked the interaction up.
        assert (status, answer["error"]["type"]) == (404, "UnknownInteraction")
