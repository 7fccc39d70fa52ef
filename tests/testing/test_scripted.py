"""ScriptedModel: deterministic replay of scripted rounds."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import (
    AgentModel,
    Capabilities,
    Client,
    Completed,
    GenerationEvent,
    GenerationRequest,
    InvalidRequest,
    Message,
    ModelError,
    ReasoningDelta,
    Response,
    TextDelta,
    ToolCall,
    Usage,
)
from emelex.model import Progress as ProgressEvent
from emelex.testing import (
    Call,
    Fail,
    Finish,
    InvalidScript,
    Progress,
    Say,
    ScriptedModel,
    ScriptExhausted,
    Think,
    Wait,
)

REQUEST = GenerationRequest([Message.user("hi")])


async def collect(model: AgentModel, request: GenerationRequest = REQUEST) -> list[GenerationEvent]:
    async with model.generate(request) as stream:
        return [event async for event in stream]


async def collect_into(model: AgentModel, seen: list[GenerationEvent]) -> None:
    async with model.generate(REQUEST) as stream:
        async for event in stream:
            seen.append(event)


async def test_say_streams_text_and_completes() -> None:
    model = ScriptedModel([[Say("Hel"), Say("lo")]])
    events = await collect(model)
    assert events == [
        TextDelta("Hel"),
        TextDelta("lo"),
        Completed(Response("Hello", None, (), Usage(1, 2), "stop")),
    ]
    assert model.completed_rounds == (0,)
    assert model.remaining_rounds == 0


async def test_think_and_call_shape_the_terminal_response() -> None:
    model = ScriptedModel(
        [
            [Think("need "), Think("file"), Call("read_file", {"path": "notes.txt"})],
            [Call("now"), Call("grep", {"pattern": "x"}, id="mine"), Call("now")],
            [Say("done")],
        ]
    )
    request = GenerationRequest([Message.system("s"), Message.user("u")])
    first = await collect(model, request)
    assert first[:2] == [ReasoningDelta("need "), ReasoningDelta("file")]
    assert first[2] == Completed(
        Response(
            "",
            "need file",
            (ToolCall("call_0", "read_file", {"path": "notes.txt"}),),
            Usage(input_tokens=2, output_tokens=3),
            "tool_calls",
        )
    )
    assert len(first) == 3  # calls produce no stream event
    second = await collect(model)
    assert second == [
        Completed(
            Response(
                "",
                None,
                (
                    ToolCall("call_1", "now", {}),
                    ToolCall("mine", "grep", {"pattern": "x"}),
                    ToolCall("call_3", "now", {}),
                ),
                Usage(1, 3),
                "tool_calls",
            )
        )
    ]
    third = await collect(model)
    final = third[-1]
    assert isinstance(final, Completed)
    assert final.response.finish_reason == "stop"


async def test_requests_are_recorded_in_order() -> None:
    model = ScriptedModel([[Say("a")], [Say("b")], [Say("c")]])
    first = GenerationRequest([Message.user("one")])
    second = GenerationRequest([Message.user("two")])
    assert model.calls_made == 0
    assert model.remaining_rounds == 3
    await collect(model, first)
    await collect(model, second)
    assert model.requests == (first, second)
    assert model.calls_made == 2
    assert model.remaining_rounds == 1


async def test_running_out_of_rounds_raises_script_exhausted() -> None:
    model = ScriptedModel([[Say("only")]])
    await collect(model)
    late = GenerationRequest([Message.user("again")])
    with pytest.raises(ScriptExhausted, match="1 round"):
        await collect(model, late)
    assert model.requests[-1] == late
    assert issubclass(ScriptExhausted, ModelError)


async def test_empty_round_completes_with_empty_response() -> None:
    model = ScriptedModel([[]])
    assert await collect(model) == [Completed(Response("", None, (), Usage(1, 0), "stop"))]


async def test_wait_uses_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([[Say("a"), Wait(30), Say("b"), Wait(0.5)]])
    start = trio.current_time()
    stamps: list[float] = []
    async with model.generate(REQUEST) as stream:
        async for _ in stream:
            stamps.append(trio.current_time() - start)
    assert stamps == [0, 30, 30.5]


async def test_cancelled_wait_abandons_the_round(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([[Say("a"), Wait(60), Say("never")], [Say("next")]])
    seen: list[GenerationEvent] = []
    with trio.move_on_after(5) as scope:
        async with model.generate(REQUEST) as stream:
            async for event in stream:
                seen.append(event)
    assert scope.cancelled_caught
    assert seen == [TextDelta("a")]
    assert model.abandoned_rounds == (0,)
    # The next call gets the next round.
    assert (await collect(model))[0] == TextDelta("next")
    assert model.completed_rounds == (1,)


async def test_fail_raises_the_scripted_error() -> None:
    error = ConnectionError("backend went away")
    model = ScriptedModel([[Say("partial"), Fail(error), Say("unreachable")]])
    seen: list[GenerationEvent] = []
    with pytest.raises(ConnectionError) as info:
        await collect_into(model, seen)
    assert info.value is error
    assert seen == [TextDelta("partial")]
    assert model.failed_rounds == (0,)
    assert model.abandoned_rounds == ()


async def test_fail_accepts_an_exception_class() -> None:
    model = ScriptedModel([[Fail(TimeoutError)]])
    with pytest.raises(TimeoutError):
        await collect(model)


async def test_progress_step_streams_a_progress_event() -> None:
    model = ScriptedModel([[Progress(5, 10), Progress(1, None, stage="load", message="mmap")]])
    events = await collect(model)
    assert events[:2] == [
        ProgressEvent("prompt", 5, 10),
        ProgressEvent("load", 1, None, "mmap"),
    ]


async def test_finish_overrides_the_terminal_response() -> None:
    call = ToolCall("x", "t", {})
    model = ScriptedModel(
        [
            [Say("Hello"), Finish(text="Goodbye")],  # not a prefix: a contract violation
            [Say("answer"), Finish(reasoning="terminal-only thoughts")],
            [Think("streamed"), Finish(reasoning=None)],
            [Finish(usage=Usage(100, 7), finish_reason="length", tool_calls=[call])],
        ]
    )
    responses = []
    for _ in range(4):
        final = (await collect(model))[-1]
        assert isinstance(final, Completed)
        responses.append(final.response)
    assert responses[0].text == "Goodbye"
    assert responses[1] == Response("answer", "terminal-only thoughts", (), Usage(1, 1), "stop")
    assert responses[2].reasoning is None
    assert responses[3] == Response("", None, (call,), Usage(100, 7), "length")


async def test_breaking_out_early_records_an_abandoned_round() -> None:
    model = ScriptedModel([[Say("a"), Say("b"), Say("c")]])
    async with model.generate(REQUEST) as stream:
        async for event in stream:
            assert event == TextDelta("a")
            break
    assert model.abandoned_rounds == (0,)
    assert model.completed_rounds == ()
    with pytest.raises(trio.ClosedResourceError):
        await stream.__anext__()


async def test_consumer_exception_abandons_the_round() -> None:
    model = ScriptedModel([[Say("a"), Say("b")]])

    async def consume() -> None:
        async with model.generate(REQUEST) as stream:
            async for _ in stream:
                raise KeyError("consumer failed")

    with pytest.raises(KeyError):
        await consume()
    assert model.abandoned_rounds == (0,)


async def test_stream_ends_after_completed() -> None:
    model = ScriptedModel([[Say("a")]])
    async with model.generate(REQUEST) as stream:
        events = [event async for event in stream]
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
    assert isinstance(events[-1], Completed)


async def test_every_event_is_a_checkpoint() -> None:
    model = ScriptedModel([[Say("a"), Think("b"), Progress(1, 2)]])
    async with model.generate(REQUEST) as stream:
        for _ in range(4):
            with trio.testing.assert_checkpoints():
                await stream.__anext__()


async def test_entering_does_not_checkpoint() -> None:
    model = ScriptedModel([[Say("a")]])
    with trio.testing.assert_no_checkpoints():
        context = model.generate(REQUEST)
        stream = await context.__aenter__()
    async for _ in stream:
        pass
    await context.__aexit__(None, None, None)
    assert model.completed_rounds == (0,)


async def test_concurrent_iteration_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    model = ScriptedModel([[Wait(10), Say("a")]])
    async with model.generate(REQUEST) as stream, trio.open_nursery() as nursery:
        nursery.start_soon(stream.__anext__)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await stream.__anext__()


async def test_generation_context_is_single_use() -> None:
    model = ScriptedModel([[Say("a")], [Say("b")]])
    context = model.generate(REQUEST)
    async with context as stream:
        async for _ in stream:
            pass
    with pytest.raises(RuntimeError):
        async with context:
            pass
    assert model.remaining_rounds == 1


def test_generate_checks_the_request() -> None:
    model = ScriptedModel([[Say("a")]])
    with pytest.raises(InvalidRequest):
        model.generate("hi")  # type: ignore[arg-type]
    assert model.calls_made == 0


async def test_is_an_agent_model_usable_through_a_client() -> None:
    model = ScriptedModel([[Say("via client")]], capabilities=Capabilities.all_proven())
    assert isinstance(model, AgentModel)
    client = Client(model)
    assert client.capabilities == Capabilities.all_proven()
    assert ScriptedModel([]).capabilities == Capabilities.unknown()
    events = await collect(client)
    assert events[0] == TextDelta("via client")


@pytest.mark.parametrize(
    "rounds",
    [
        [[Finish(text="x"), Say("after")]],
        [[Finish(), Finish()]],
        [["Say hi"]],
        ["not a round"],
        [[Say("a")], 5],
    ],
)
def test_malformed_scripts_are_rejected(rounds: Any) -> None:
    with pytest.raises(InvalidScript):
        ScriptedModel(rounds)


@pytest.mark.parametrize(
    ("step", "args", "kwargs"),
    [
        (Say, (5,), {}),
        (Think, (None,), {}),
        (Call, ("t", [1, 2]), {}),
        (Call, ("t", {}), {"id": ""}),
        (Wait, (-1,), {}),
        (Wait, (True,), {}),
        (Fail, ("boom",), {}),
        (Fail, (int,), {}),
        (Progress, (5, 1), {}),
        (Progress, (-1,), {}),
        (Finish, (), {"text": None}),
        (Finish, (), {"usage": (1, 2)}),
        (Finish, (), {"finish_reason": "done"}),
        (Finish, (), {"tool_calls": ["call"]}),
        (Finish, (), {"tool_calls": "call"}),
    ],
)
def test_malformed_steps_are_rejected(step: Any, args: Any, kwargs: Any) -> None:
    with pytest.raises(InvalidScript):
        step(*args, **kwargs)


def test_call_names_are_checked_when_the_script_is_built() -> None:
    with pytest.raises(InvalidScript):
        ScriptedModel([[Call("")]])


def test_capabilities_must_be_capabilities() -> None:
    with pytest.raises(InvalidScript):
        ScriptedModel([], capabilities={"system_prompt": True})  # type: ignore[arg-type]


def test_default_call_ids_are_deterministic_and_not_uuids() -> None:
    model = ScriptedModel([[Call("a"), Call("b")], [Call("c")]])
    again = ScriptedModel([[Call("a"), Call("b")], [Call("c")]])

    async def ids(m: ScriptedModel) -> list[str]:
        found = []
        for _ in range(2):
            final = (await collect(m))[-1]
            assert isinstance(final, Completed)
            found += [call.id for call in final.response.tool_calls]
        return found

    assert trio.run(ids, model) == trio.run(ids, again) == ["call_0", "call_1", "call_2"]


STEPS = st.lists(
    st.one_of(st.builds(Say, st.text(max_size=5)), st.builds(Think, st.text(max_size=5))),
    max_size=8,
)


@given(STEPS)
async def test_deltas_concatenate_to_the_terminal_response(steps: list[Say | Think]) -> None:
    model = ScriptedModel([steps])
    events = await collect(model)
    final = events[-1]
    assert isinstance(final, Completed)
    assert sum(isinstance(event, Completed) for event in events) == 1
    text = "".join(event.text for event in events if isinstance(event, TextDelta))
    reasoning = "".join(event.text for event in events if isinstance(event, ReasoningDelta))
    assert final.response.text == text
    has_think = any(isinstance(step, Think) for step in steps)
    assert final.response.reasoning == (reasoning if has_think else None)
    assert final.response.usage == Usage(1, len(steps))
