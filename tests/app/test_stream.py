"""Session.stream_text (app/_stream.py): text chunks of one turn, owned by the block."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from emelex.agent import ModelFailed, TurnCancelled
from emelex.app import Engine, StreamNotOpen, TextStream
from emelex.runtime import AgentCancellation
from emelex.testing import Call, Fail, Say, ScriptedModel, ScriptedTool, Wait

from .helpers import builder, scripted


async def test_the_answer_streams_chunk_by_chunk_and_the_turn_commits() -> None:
    model = scripted([Say("Hel"), Say("lo, "), Say("world")])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        chunks = []
        with trio.fail_after(10):
            async with session.stream_text("Hi") as texts:
                assert isinstance(texts, TextStream)
                async for text in texts:
                    chunks.append(text)
        assert chunks == ["Hel", "lo, ", "world"]
        assert texts.turn is not None and texts.turn.response.text == "Hello, world"
        assert [m.role for m in session.history] == ["system", "user", "assistant"]


async def test_text_before_a_tool_call_and_after_it_is_streamed() -> None:
    echo = ScriptedTool(name="echo")
    model = scripted([Say("Let me check. "), Call("echo", {})], [Say("It is done.")])
    async with Engine() as engine:
        session = await engine.create(builder(model).tool(echo).build()).start()
        with trio.fail_after(10):
            async with session.stream_text("Check") as texts:
                chunks = [text async for text in texts]
    assert chunks == ["Let me check. ", "It is done."]


async def test_leaving_early_cancels_the_turn_and_waits_for_it() -> None:
    model = ScriptedModel([[Say("first"), Wait(3600), Say("never")], [Say("next")]])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        with trio.fail_after(10):
            async with session.stream_text("Go") as texts:
                async for text in texts:
                    assert text == "first"
                    break
            # By the end of the block the turn is over: its model round was left,
            # history rolled back, and the session takes the next turn at once.
            assert model.abandoned_rounds == (0,)
            assert texts.turn is None
            assert [m.role for m in session.history] == ["system"]
            turn = await session.send_and_wait("Again")
    assert turn.response.text == "next"


async def test_leaving_while_a_tool_runs_waits_for_its_one_result() -> None:
    slow = ScriptedTool(name="slow", duration=0.3)
    model = scripted([Say("Working. "), Call("slow", {})], [Say("unreached")])
    async with Engine() as engine:
        session = await engine.create(builder(model).tool(slow).build()).start()
        with trio.fail_after(10):
            async with session.stream_text("Go") as texts:
                async for _text in texts:
                    await trio.testing.wait_all_tasks_blocked()  # the tool is running
                    assert len(slow.started) == 1
                    break
        # FINISH_ONCE_STARTED: the block's exit waited for the tool's result, which
        # is in the committed checkpoint; the answer round never ran.
        assert slow.finished == slow.started
        assert [m.role for m in session.history] == ["system", "user", "assistant", "tool"]
        assert model.calls_made == 1


async def test_an_error_in_the_block_propagates_alone_and_ends_the_turn() -> None:
    model = ScriptedModel([[Say("a"), Wait(3600)]])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        with trio.fail_after(10), pytest.raises(KeyError, match="reader failed"):
            async with session.stream_text("Go") as texts:
                async for _text in texts:
                    raise KeyError("reader failed")
        assert model.abandoned_rounds == (0,)
        assert [m.role for m in session.history] == ["system"]


async def test_a_failed_turn_raises_from_the_iteration() -> None:
    model = scripted([Say("par"), Fail(RuntimeError("backend died"))])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        chunks = []
        with trio.fail_after(10), pytest.raises(ModelFailed, match="backend died") as caught:
            async with session.stream_text("Go") as texts:
                async for text in texts:
                    chunks.append(text)
    assert chunks == ["par"]
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert caught.value.rolled_back is True


async def test_the_callers_cancellation_ends_the_stream_with_turn_cancelled() -> None:
    model = ScriptedModel([[Say("a"), Wait(3600)]])
    cancellation = AgentCancellation()
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        with trio.fail_after(10), pytest.raises(TurnCancelled):
            async with session.stream_text("Go", cancellation=cancellation) as texts:
                async for _text in texts:
                    cancellation.cancel()


async def test_a_cancelled_scope_cancels_the_turn_and_leaves_nothing_running() -> None:
    model = ScriptedModel([[Say("a"), Wait(3600)]])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        with trio.move_on_after(0.2) as scope:
            async with session.stream_text("Go") as texts:
                async for _text in texts:
                    pass
        assert scope.cancelled_caught
        await trio.testing.wait_all_tasks_blocked()
        assert model.abandoned_rounds == (0,)
        assert [m.role for m in session.history] == ["system"]


async def test_iterating_without_the_block_is_a_typed_error() -> None:
    model = scripted([Say("x")])
    async with Engine() as engine:
        session = await engine.create(builder(model).build()).start()
        with pytest.raises(StreamNotOpen, match=r"async with session\.stream_text"):
            async for _text in session.stream_text("Hi"):
                pass
        stream = session.stream_text("Hi")
        async with stream:
            assert [t async for t in stream] == ["x"]
        with pytest.raises(StreamNotOpen, match="once"):
            async with stream:
                pass
    assert model.calls_made == 1
