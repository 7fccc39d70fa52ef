"""Actor spans: one per actor, nested like the actor tree, current while the actor runs,
and nothing at all without a tracer provider."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from emelex.runtime import (
    ActorContext,
    ActorKind,
    ActorTree,
    CancellationPolicy,
    Supervisor,
    current_actor,
    open_supervisor,
    run_in_worker,
)
from emelex.runtime._tracing import global_tracer
from tests.spans import Recorder, attr, span_edges, tree_edges


async def test_without_a_provider_actors_have_no_span() -> None:
    assert global_tracer() is None  # the suite never configures a global provider
    seen: list[object] = []

    async def child(ctx: ActorContext) -> None:
        seen.append(ctx.actor.span)

    async with open_supervisor("plain") as supervisor:
        async with supervisor.open_actor(ActorKind.SESSION, "s") as session:
            assert session.actor is not None
            seen.append(session.actor.span)
            await session.run(child, kind=ActorKind.TOOL, name="t")
    assert seen == [None, None]


async def test_span_tree_is_the_actor_tree_across_tasks_threads_and_policies() -> None:
    recorder = Recorder.open()
    trees: list[ActorTree] = []

    def look() -> None:
        trees.append(Supervisor.current().snapshot())

    async def leaf(ctx: ActorContext) -> str:
        look()
        await trio.lowlevel.checkpoint()
        return ctx.actor.kind

    async def service(ctx: ActorContext) -> None:
        ctx.started()
        look()
        await trio.sleep_forever()

    async with open_supervisor("traced", tracer_provider=recorder.provider) as supervisor:
        handle = await supervisor.actors.start(service, kind=ActorKind.SERVICE, name="svc")
        async with supervisor.open_actor(ActorKind.SESSION, "s") as session:
            async with supervisor.open_actor(ActorKind.TURN, "t") as turn:
                assert await turn.run(leaf, kind=ActorKind.MODEL_JOB, name="m") == "model_job"
                call = turn.call(
                    leaf,
                    kind=ActorKind.TOOL,
                    name="tool",
                    policy=CancellationPolicy.FINISH_ONCE_STARTED,
                )
                assert await call.result() == "tool"

                async def spawner(ctx: ActorContext) -> None:
                    # Spawned from the tool's task into the turn's nursery: a child of the
                    # turn, whatever context the spawning task carries.
                    turn.start_soon(leaf, kind="custom", name="sibling")

                await turn.run(spawner, kind=ActorKind.TOOL, name="spawner")

                def in_thread() -> int:
                    return 7

                assert await run_in_worker(in_thread, name="w") == 7
                look()
            assert session.actor is not None
        handle.cancel()
    assert recorder.spans
    edges = span_edges(recorder.spans)
    # Every actor of the run has exactly one span, parented on its parent actor's span.
    assert len(edges) == len(recorder.spans) == supervisor.spawned_actors
    assert tree_edges(trees) <= edges
    kinds = {kind for _, kind, _ in edges}
    assert kinds == {"service", "session", "turn", "model_job", "tool", "worker_thread", "custom"}
    (sibling,) = recorder.of_kind("custom")
    (turn_span,) = recorder.of_kind("turn")
    assert sibling.parent is not None and turn_span.context is not None
    assert sibling.parent.span_id == turn_span.context.span_id
    tool, _spawner = recorder.of_kind("tool")
    assert attr(tool, "emelex.cancellation.policy") == "finish_once_started"
    (model,) = recorder.of_kind("model_job")
    assert attr(model, "emelex.cancellation.policy") == "drop"
    assert attr(model, "emelex.actor.state") == "done"
    (svc,) = recorder.of_kind("service")
    assert attr(svc, "emelex.actor.cancel_requested") is True
    assert svc.parent is None
    # One trace per root actor.
    (session_span,) = recorder.of_kind("session")
    assert turn_span.context is not None and session_span.context is not None
    assert turn_span.context.trace_id == session_span.context.trace_id
    assert svc.context is not None and svc.context.trace_id != session_span.context.trace_id


async def test_the_actor_span_is_current_inside_the_actor_and_roots_join_the_caller() -> None:
    recorder = Recorder.open()
    tracer = recorder.provider.get_tracer("app")

    async def tool(ctx: ActorContext) -> None:
        # A span the tool's own code opens nests under the tool actor.
        with tracer.start_as_current_span("inside tool"):
            await trio.lowlevel.checkpoint()

    async with open_supervisor("traced", tracer_provider=recorder.provider) as supervisor:
        with tracer.start_as_current_span("application"):
            async with supervisor.open_actor(ActorKind.TURN, "t") as turn:
                await turn.call(
                    tool, kind=ActorKind.TOOL, name="x", policy=CancellationPolicy.AWAIT_COMPLETION
                ).result()
        # Outside every actor the caller's context is back to what it was.
        assert trace.get_current_span() is trace.INVALID_SPAN
    by_name = {span.name: span for span in recorder.spans}
    application, turn_span = by_name["application"], by_name["turn t"]
    tool_span, inside = by_name["tool x"], by_name["inside tool"]
    assert turn_span.parent is not None and application.context is not None
    assert turn_span.parent.span_id == application.context.span_id
    assert inside.parent is not None and tool_span.context is not None
    assert inside.parent.span_id == tool_span.context.span_id


async def test_failed_and_dropped_actors_are_marked() -> None:
    recorder = Recorder.open()

    async def broken(ctx: ActorContext) -> None:
        raise KeyError("boom")

    async def slow(ctx: ActorContext) -> None:
        await trio.sleep_forever()

    async with open_supervisor("traced", tracer_provider=recorder.provider) as supervisor:
        async with supervisor.open_actor(ActorKind.TURN, "t") as turn:
            with pytest.raises(KeyError):
                await turn.run(broken, kind=ActorKind.TOOL, name="broken")
            call = turn.call(slow, kind=ActorKind.TOOL, name="slow")
            await trio.testing.wait_all_tasks_blocked()
            call.cancel()
            await call.wait_finished()
            assert current_actor() is turn.actor
    by_name = {span.name: span for span in recorder.spans}
    failed = by_name["tool broken"]
    assert failed.status.status_code is StatusCode.ERROR
    assert attr(failed, "error.type") == "KeyError"
    assert attr(failed, "emelex.actor.state") == "failed"
    assert [event.name for event in failed.events] == ["exception"]
    dropped = by_name["tool slow"]
    assert attr(dropped, "emelex.actor.dropped") is True
    assert attr(dropped, "emelex.actor.cancelled") is True
    assert dropped.status.status_code is StatusCode.UNSET


GLOBAL_PROVIDER_SCRIPT = """
import json, sys, trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from emelex.agent import AgentSession
from emelex.testing import Say, ScriptedModel

async def main():
    model = ScriptedModel([[Say("one")], [Say("two")]])
    builder = AgentSession.builder(model, sys.argv[1])
    with builder.include_file_tools(False).include_shell_tool(False).build() as session:
        await session.run("first")  # no provider yet: untraced
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        await session.run("second")
    return [span.attributes["emelex.actor.kind"] for span in exporter.get_finished_spans()]

print(json.dumps(trio.run(main)))
"""


def test_a_global_provider_set_later_traces_the_turns_after_it(tmp_path: Path) -> None:
    # In a child interpreter: the global provider can be set once per process.
    result = subprocess.run(
        [sys.executable, "-c", GLOBAL_PROVIDER_SCRIPT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == ["model_job", "turn", "session"]
