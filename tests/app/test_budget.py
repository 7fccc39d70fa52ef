"""Context and usage budgets: the pure message filter, its properties, and budgeted
sessions driven end to end with a scripted model."""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import pytest
import trio
import trio.testing
from hypothesis import event, given, settings
from hypothesis import strategies as st

from emelex import LimitExceeded
from emelex.agent import AgentError, CeilingExceeded, TurnCancelled, TurnFailed
from emelex.app import (
    MEDIA_PART_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    AppError,
    BudgetExceeded,
    BudgetUsage,
    ContextBudget,
    ContextBudgetExceeded,
    Engine,
    Harness,
    InvalidBudget,
    Session,
    UsageBudget,
    UsageBudgetExhausted,
    fit_messages,
    fit_request,
)
from emelex.model import (
    GenerationRequest,
    ImagePart,
    Message,
    TextPart,
    ToolCall,
    ToolDefinition,
    Usage,
)
from emelex.runtime import AgentCancellation
from emelex.testing import Call, Fail, Finish, Say, ScriptedModel, Wait

from .helpers import builder, outputs, run_collecting

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def cost(messages: Sequence[Message], budget: ContextBudget) -> int:
    return sum(budget.message_tokens(message) for message in messages)


def round_of(call_id: str, result: str, name: str = "read_file") -> list[Message]:
    call = ToolCall(call_id, name, {"path": "notes.txt"})
    return [Message.assistant(tool_calls=[call]), Message.tool(call_id, result)]


# -- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes",
    [
        {"max_tokens": 0},
        {"max_tokens": True},
        {"max_tokens": 10_000_001},
        {"max_tokens": 100.0},
        {"bytes_per_token": 0},
        {"bytes_per_token": 17},
        {"keep_result_bytes": 63},
    ],
)
def test_context_budget_values_are_checked(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidBudget):
        ContextBudget(**changes)  # type: ignore[arg-type]


def test_usage_budget_and_harness_values_are_checked() -> None:
    assert UsageBudget() == UsageBudget(None, None)
    for bad in ({"max_total_tokens": 0}, {"max_model_calls": -1}, {"max_model_calls": "3"}):
        with pytest.raises(InvalidBudget):
            UsageBudget(**bad)
    with pytest.raises(InvalidBudget, match="context_tokens must be a positive integer"):
        Harness.worker(context_tokens=0)
    with pytest.raises(InvalidBudget, match="max_tokens must be an integer from 1 to"):
        Harness.worker(context_tokens=10**8)
    with pytest.raises(InvalidBudget):
        Harness.shell_worker(max_total_tokens=0)
    with pytest.raises(InvalidBudget, match="context_budget"):
        Harness("mine", context_budget=1000)  # type: ignore[arg-type]
    with pytest.raises(InvalidBudget, match="usage_budget"):
        Harness("mine", usage_budget=1000)  # type: ignore[arg-type]
    worker = Harness.worker(context_tokens=None, max_total_tokens=500, max_model_calls=3)
    assert worker.context_budget is None
    assert worker.usage_budget == UsageBudget(500, 3)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        worker.tasks = False  # type: ignore[misc]


def test_budget_errors_are_app_agent_and_limit_errors() -> None:
    for error in (ContextBudgetExceeded, UsageBudgetExhausted):
        assert issubclass(error, BudgetExceeded)
        assert issubclass(error, AppError) and issubclass(error, AgentError)
        assert issubclass(error, LimitExceeded)


# -- the estimate ------------------------------------------------------------------------


def test_the_estimate_is_bytes_over_the_ratio_plus_fixed_overheads() -> None:
    budget = ContextBudget(1000)
    assert budget.message_tokens(Message.user("abcd" * 10)) == MESSAGE_OVERHEAD_TOKENS + 10
    assert budget.message_tokens(Message.user("abcde")) == MESSAGE_OVERHEAD_TOKENS + 2
    assert budget.message_tokens(Message.user("é")) == MESSAGE_OVERHEAD_TOKENS + 1  # 2 bytes
    image = Message.user([TextPart("abcd"), ImagePart(PNG, "image/png")])
    assert budget.message_tokens(image) == MESSAGE_OVERHEAD_TOKENS + 1 + MEDIA_PART_TOKENS
    call = Message.assistant(
        "ok", reasoning="hmm", tool_calls=[ToolCall("c1", "grep", {"pattern": "x"})]
    )
    # "ok" + "hmm" + "grep" + '{"pattern":"x"}' = 2 + 3 + 4 + 15 bytes
    assert budget.message_tokens(call) == MESSAGE_OVERHEAD_TOKENS + 6
    assert ContextBudget(1000, bytes_per_token=1).message_tokens(call) == 4 + 24
    tool = ToolDefinition("t", "d", {"type": "object"})
    # {"name":"t","description":"d","parameters":{"type":"object"}}: 61 bytes
    assert budget.tools_tokens([tool]) == MESSAGE_OVERHEAD_TOKENS + 16
    request = GenerationRequest([Message.user("abcd")], tools=[tool])
    assert budget.request_tokens(request) == 20 + 5
    assert ContextBudget(32_768).tool_result_bytes == 32_768
    assert ContextBudget(100).tool_result_bytes == 4096


# -- the filter, by example --------------------------------------------------------------


def test_a_request_within_budget_is_returned_unchanged() -> None:
    messages = (Message.system("rules"), Message.user("hi"))
    budget = ContextBudget(cost(messages, ContextBudget()))
    assert fit_messages(messages, budget) is messages
    request = GenerationRequest(messages)
    assert fit_request(request, budget) is request


def test_older_tool_results_are_shortened_to_head_and_tail_first() -> None:
    old = "HEAD" + "a" * 20_000 + "TAIL"
    latest = "b" * 8_000
    messages = (
        Message.system("rules"),
        Message.user("first"),
        *round_of("c1", old),
        Message.assistant("done"),
        Message.user("second"),
        *round_of("c2", latest),
    )
    budget = ContextBudget(3_000, keep_result_bytes=300)
    fitted = fit_messages(messages, budget)
    assert len(fitted) == len(messages)
    shortened = fitted[3]
    assert shortened.tool_call_id == "c1"
    assert shortened.text.startswith("HEAD" + "a" * 196)
    assert shortened.text.endswith("a" * 96 + "TAIL")
    elided = len(old) - 300
    assert f"[... {elided:,} bytes of this older tool result left out" in shortened.text
    assert fitted[-1] is messages[-1]  # the latest round is never shortened
    assert [m for i, m in enumerate(fitted) if i != 3] == [
        m for i, m in enumerate(messages) if i != 3
    ]
    assert cost(fitted, budget) <= 3_000


def test_media_in_older_results_is_left_out_with_a_note() -> None:
    call = ToolCall("c1", "screenshot", {})
    messages = (
        Message.user("look"),
        Message.assistant(tool_calls=[call]),
        Message.tool("c1", [TextPart("a screenshot"), ImagePart(PNG, "image/png")]),
        Message.assistant("seen"),
        Message.user("again"),
    )
    budget = ContextBudget(500)
    fitted = fit_messages(messages, budget)
    assert fitted[2].content == (
        TextPart(
            "a screenshot\n[... 1 media part of this older tool result left out to fit the "
            "context budget ...]\n"
        ),
    )


def test_then_the_oldest_turns_and_then_older_rounds_are_dropped() -> None:
    def thinking_round(call_id: str) -> list[Message]:
        call = ToolCall(call_id, "grep", {"pattern": "x"})
        return [Message.assistant("think " * 200, tool_calls=[call]), Message.tool(call_id, "r")]

    system = Message.system("rules")
    turn1 = [Message.user("one " * 300), Message.assistant("answer one " * 100)]
    turn2 = [Message.user("two " * 300), *round_of("c1", "r1"), Message.assistant("a2 " * 100)]
    current = Message.user("now")
    rounds = [*thinking_round("c2"), *thinking_round("c3"), *thinking_round("c4")]
    messages = (system, *turn1, *turn2, current, *rounds)
    budget = ContextBudget(10_000)
    # Nothing here is worth shortening; dropping the first turn is enough.
    fitted = fit_messages(messages, ContextBudget(cost(messages, budget) - cost(turn1, budget)))
    assert fitted == (system, *turn2, current, *rounds)
    # Tighter: the second turn goes too, and then the oldest round of the current turn.
    room = cost([system, current, *rounds[2:]], budget)
    fitted = fit_messages(messages, ContextBudget(room))
    assert fitted == (system, current, *rounds[2:])
    # The protected part is exactly what remains at the end.
    fitted = fit_messages(messages, ContextBudget(room - cost(rounds[2:4], budget)))
    assert fitted == (system, current, *rounds[4:])
    with pytest.raises(ContextBudgetExceeded):
        fit_messages(messages, ContextBudget(cost([system, current, *rounds[4:]], budget) - 1))


def test_a_request_whose_protected_part_does_not_fit_raises() -> None:
    messages = (Message.system("s" * 400), Message.user("u" * 400), *round_of("c1", "r" * 4000))
    budget = ContextBudget(500)
    with pytest.raises(ContextBudgetExceeded, match="over the context budget of 500") as caught:
        fit_messages(messages, budget)
    assert caught.value.maximum == 500
    assert caught.value.actual == cost(messages, budget)
    assert caught.value.limit == "context budget (estimated tokens)"
    tools = [ToolDefinition("t", "d" * 4000, {"type": "object"})]
    with pytest.raises(ContextBudgetExceeded):
        fit_request(GenerationRequest([Message.user("hi")], tools=tools), budget)


# -- the filter, by property -------------------------------------------------------------

_CHARS = st.sampled_from(["a", "é", "€", "𝄞", " ", "\n"])


@st.composite
def texts(draw: st.DrawFn, max_size: int = 3000) -> str:
    unit = draw(_CHARS)
    return str(unit * draw(st.integers(0, max_size)))


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    """Requests as a harness builds them: an optional system message, earlier turns,
    and a current turn ending with its user message or its latest tool round."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message.system(draw(texts(800))))
    turns = draw(st.integers(1, 5))
    calls = 0
    for turn in range(turns):
        messages.append(Message.user(draw(texts(600))))
        for _ in range(draw(st.integers(0, 3))):
            batch = []
            for _ in range(draw(st.integers(1, 3))):
                batch.append(ToolCall(f"c{calls}", "tool", {"q": draw(texts(50))}))
                calls += 1
            messages.append(Message.assistant(draw(texts(100)), tool_calls=batch))
            for call in batch:
                content: list[TextPart | ImagePart] = [TextPart(draw(texts()))]
                if draw(st.integers(0, 9)) == 0:
                    content.append(ImagePart(PNG, "image/png"))
                messages.append(Message.tool(call.id, content))
        last = turn == turns - 1
        if not last and draw(st.booleans()):
            messages.append(Message.assistant(draw(texts(300))))
    return tuple(messages)


budgets = st.builds(
    ContextBudget,
    max_tokens=st.integers(1, 6000),
    bytes_per_token=st.integers(1, 8),
    keep_result_bytes=st.integers(64, 1024),
)


def protected(messages: Sequence[Message]) -> tuple[list[Message], Message | None, list[Message]]:
    """System messages, the latest user message and the latest round of a request."""
    end = len(messages)
    while end and messages[end - 1].role == "tool":
        end -= 1
    start = end - 1 if end < len(messages) else len(messages)
    users = [m for m in messages[:start] if m.role == "user"]
    systems = [m for m in messages if m.role == "system"]
    return systems, (users[-1] if users else None), list(messages[start:])


def check_structure(messages: Sequence[Message]) -> None:
    """Every tool call is answered by exactly one result right after its message."""
    open_calls: set[str] = set()
    for message in messages:
        if message.role == "tool":
            assert message.tool_call_id in open_calls
            open_calls.remove(message.tool_call_id)
            continue
        assert not open_calls
        open_calls = {call.id for call in message.tool_calls}
    assert not open_calls


@settings(max_examples=300, deadline=None)
@given(conversations(), budgets)
def test_the_filter_fits_or_fails_and_keeps_what_it_promises(
    messages: tuple[Message, ...], budget: ContextBudget
) -> None:
    check_structure(messages)
    systems, user, latest = protected(messages)
    needed = cost([*systems, *([user] if user else []), *latest], budget)
    if needed > budget.max_tokens:
        # It fails exactly when the protected part alone is over budget.
        event("does not fit")
        with pytest.raises(ContextBudgetExceeded) as caught:
            fit_messages(messages, budget)
        assert (caught.value.actual, caught.value.maximum) == (needed, budget.max_tokens)
        return
    fitted = fit_messages(messages, budget)
    assert cost(fitted, budget) <= budget.max_tokens
    check_structure(fitted)
    assert [m for m in fitted if m.role == "system"] == systems
    if user is not None:
        assert any(m is user for m in fitted)
    assert list(fitted[len(fitted) - len(latest) :]) == latest
    # Nothing is invented or reordered: each kept message is an original one or a
    # shortened copy of an original tool result, in the original order.
    originals = iter(messages)
    for message in fitted:
        for original in originals:
            if original is message or (
                message.role == "tool" and original.tool_call_id == message.tool_call_id
            ):
                break
        else:
            pytest.fail(f"{message!r} is not from the request, in order")
    assert fit_messages(fitted, budget) is fitted  # idempotent
    if cost(messages, budget) <= budget.max_tokens:
        event("fits as it is")
        assert fitted is messages
    elif len(fitted) == len(messages):
        event("fits after shortening")
    else:
        event("fits after dropping")


# -- budgeted sessions -------------------------------------------------------------------

BIG = "".join(f"line {i:04d} " + "x" * 70 + "\n" for i in range(400))  # 32,400 bytes


async def start(model: ScriptedModel, harness: Harness, **files: str) -> tuple[Engine, Session]:
    agent = builder(model)
    for name, content in files.items():
        agent = agent.file(name, content)
    engine = Engine()
    return engine, await engine.create(agent.build()).harness(harness).start()


def reads(count: int) -> list[list[Call | Say]]:
    """Rounds reading big.txt piece by piece (each read is cut at the budget's cap)."""
    steps: list[list[Call | Say]] = [
        [Call("read_file", {"path": "big.txt", "offset": 1 + 100 * i})] for i in range(count)
    ]
    return [*steps, [Say("read")]]


async def test_the_filter_shapes_inspect_and_what_the_model_receives() -> None:
    model = ScriptedModel([*reads(4), [Say("again")]])
    harness = Harness.worker(context_tokens=6_000)
    budget = harness.context_budget
    assert budget is not None
    engine, session = await start(model, harness, **{"big.txt": BIG})
    async with engine:
        with trio.fail_after(10):
            await session.send_and_wait("read big.txt")
            history = session.history
            results = [m for m in history if m.role == "tool"]
            # One read is cut at a quarter of the budget (6,000 bytes here).
            assert all("[cut: one call returns at most 6000 bytes]" in m.text for m in results)
            unfitted = session.agent_session.next_request("next")
            assert budget.request_tokens(unfitted) > budget.max_tokens
            context = await session.inspect("next")
            await session.send_and_wait("next")
    # Within the turn, every request fit; the latest round's result was sent whole.
    assert all(budget.request_tokens(r) <= budget.max_tokens for r in model.requests)
    assert model.requests[4].messages[-1] == results[-1]
    assert "left out to fit" in model.requests[4].messages[3].text
    # The next turn's request is exactly what inspect() showed, and fits.
    sent = model.requests[-1]
    assert sent.messages == context.messages and sent.tools == context.tools
    assert budget.request_tokens(sent) <= budget.max_tokens
    shortened = sent.messages[3]
    assert shortened.tool_call_id == results[0].tool_call_id
    assert "bytes of this older tool result left out to fit the context budget" in shortened.text
    assert shortened.text.startswith(results[0].text[:1000])
    assert shortened.text.endswith(results[0].text[-500:])
    assert len(shortened.text.encode()) < 2_048 + 256
    # Committed history keeps every byte.
    assert session.history[: len(history)] == history


async def test_inspect_without_text_is_fitted_the_same_way() -> None:
    model = ScriptedModel(reads(4))
    engine, session = await start(model, Harness.worker(context_tokens=6_000), **{"big.txt": BIG})
    async with engine:
        await session.send_and_wait("read big.txt")
        with_text = await session.inspect("")
        without = await session.inspect()
    assert without.messages == with_text.messages[:-1]
    assert "left out to fit the context budget" in without.messages[3].text


async def test_the_harness_ceilings_are_checked_before_the_filter() -> None:
    model = ScriptedModel([])
    engine, session = await start(model, Harness.worker())
    async with engine:
        with pytest.raises(CeilingExceeded):
            await session.inspect("x" * (16 * 1024 * 1024 + 1))
        with pytest.raises(ContextBudgetExceeded):
            await session.inspect("x" * 200_000)
        with pytest.raises(ContextBudgetExceeded) as caught:
            await session.send_and_wait("x" * 200_000)
    assert caught.value.rolled_back is True
    assert [m.role for m in session.history] == ["system"]
    assert model.requests == ()
    assert session.usage is not None and session.usage.model_calls == 0


async def test_a_round_too_large_for_the_budget_fails_after_its_checkpoint() -> None:
    model = ScriptedModel(
        [
            [Call("read_file", {"path": "a.txt"}), Call("read_file", {"path": "b.txt"})],
            # The refused call never reached the model: this round answers the next turn.
            [Say("recovered")],
        ]
    )
    harness = Harness.worker(context_tokens=3_000)
    half = "y" * 4_000
    engine, session = await start(model, harness, **{"a.txt": half, "b.txt": half})
    async with engine:
        with pytest.raises(ContextBudgetExceeded) as caught:
            await session.send_and_wait("read both")
        assert caught.value.rolled_back is False
        assert [m.role for m in caught.value.checkpoint] == ["user", "assistant", "tool", "tool"]
        assert len(model.requests) == 1
        # The next turn sees those results shortened, so it fits again.
        turn = await session.send_and_wait("go on")
    assert turn.response.text == "recovered"
    assert "left out to fit" in model.requests[-1].messages[3].text


def scripted_usage(*rounds: list[Call | Say], tokens: Usage) -> ScriptedModel:
    return ScriptedModel([[*steps, Finish(usage=tokens)] for steps in rounds])


async def test_the_token_budget_stops_the_next_model_call() -> None:
    model = scripted_usage(
        [Call("list_directory", {"path": "."})], [Say("one")], [Say("two")], tokens=Usage(60, 40)
    )
    engine, session = await start(model, Harness.worker(max_total_tokens=150))
    async with engine:
        # The first call used 100 tokens, under 150: the second may still run.
        await session.send_and_wait("list")
        usage = session.usage
        assert usage is not None
        assert (usage.total_tokens, usage.model_calls, usage.remaining_tokens) == (200, 2, 0)
        history = session.history
        _, error = await run_collecting_failure(session, "more")
    assert isinstance(error, UsageBudgetExhausted)
    assert error.limit == "token budget" and (error.maximum, error.actual) == (150, 200)
    assert error.rolled_back is True and error.checkpoint == ()
    assert "used 200 tokens of its budget of 150" in str(error)
    assert session.history == history
    assert len(model.requests) == 2


async def run_collecting_failure(session: Session, text: str) -> tuple[list[object], Exception]:
    seen: list[object] = []
    async with session.events() as stream, trio.open_nursery() as nursery:

        async def consume() -> None:
            async for event in stream:
                seen.append(event)
                if isinstance(event, TurnFailed):
                    return

        nursery.start_soon(consume)
        with pytest.raises(UsageBudgetExhausted) as caught:
            await session.send_and_wait(text)
    assert isinstance(seen[-1], TurnFailed)
    assert seen[-1].rolled_back is caught.value.rolled_back
    return seen, caught.value


async def test_an_exhausted_call_budget_after_a_tool_checkpoints_the_turn() -> None:
    model = ScriptedModel([[Call("list_directory", {"path": "."})], [Say("never")]])
    engine, session = await start(model, Harness.worker(max_model_calls=1))
    async with engine:
        _, error = await run_collecting_failure(session, "list")
    assert isinstance(error, UsageBudgetExhausted)
    assert error.limit == "model-call budget" and (error.maximum, error.actual) == (1, 1)
    assert error.rolled_back is False
    assert [m.role for m in error.checkpoint] == ["user", "assistant", "tool"]
    assert [m.role for m in session.history] == ["system", "user", "assistant", "tool"]
    assert len(model.requests) == 1


async def test_check_budget_reports_what_was_used_and_what_remains() -> None:
    model = ScriptedModel(
        [
            [Call("check_budget"), Finish(usage=Usage(300, 20))],
            [Call("check_budget"), Finish(usage=Usage(400, 30))],
            [Say("plenty left"), Finish(usage=Usage(500, 5))],
        ]
    )
    harness = Harness.worker(context_tokens=10_000, max_total_tokens=5_000, max_model_calls=9)
    engine, session = await start(model, harness)
    async with engine:
        with trio.fail_after(10):
            turn, events = await run_collecting(session, "how much is left?")
    reports = [output.text for output in outputs(events)]
    assert harness.context_budget is not None
    first_size = harness.context_budget.request_tokens(model.requests[0])
    second_size = harness.context_budget.request_tokens(model.requests[1])
    assert reports[0] == (
        "Budget\n"
        "Tokens used: 320 (input 300, output 20); remaining: 4,680 of 5,000.\n"
        "Model calls made: 1; remaining: 8 of 9.\n"
        f"Context: the last request held about {first_size:,} of 10,000 estimated tokens; "
        "beyond that, older tool results are shortened and the earliest exchanges left out."
    )
    assert "Tokens used: 750 (input 700, output 50); remaining: 4,250 of 5,000." in reports[1]
    assert "Model calls made: 2; remaining: 7 of 9." in reports[1]
    assert f"about {second_size:,} of 10,000" in reports[1]
    assert turn.usage == Usage(1200, 55)
    assert session.usage == BudgetUsage(
        Usage(1200, 55),
        3,
        UsageBudget(5_000, 9),
        harness.context_budget,
        harness.context_budget.request_tokens(model.requests[2]),
    )


async def test_without_limits_usage_is_counted_and_reported_as_unlimited() -> None:
    model = ScriptedModel([[Call("check_budget")], [Fail(RuntimeError("backend down"))]])
    engine, session = await start(model, Harness.worker(context_tokens=None))
    async with engine:
        with pytest.raises(AgentError):
            await session.send_and_wait("check")
    usage = session.usage
    assert usage is not None
    # The failed call counts as a call but reported no tokens; the scripted model
    # reports one input token per message and one output token per step.
    assert usage.model_calls == 2
    assert usage.usage == Usage(len(model.requests[0].messages), 1)
    assert usage.remaining_tokens is None and usage.remaining_model_calls is None
    assert usage.exhausted() is None
    report = session.history[3].text
    assert "; no token limit." in report and "; no call limit." in report
    assert "Context:" not in report


async def test_a_harness_without_budgets_has_no_usage_and_no_filter() -> None:
    model = ScriptedModel([[Say("hi")]])
    engine, session = await start(model, Harness.conversation())
    async with engine:
        assert session.usage is None
        assert "check_budget" not in session.tools
        await session.send_and_wait("x" * 200_000)
    assert model.requests[0].messages[-1].text == "x" * 200_000
    only_context = attrs.evolve(Harness.worker(context_tokens=4_000), usage_budget=None)
    engine, session = await start(ScriptedModel([]), only_context)
    async with engine:
        assert "check_budget" not in session.tools
        prompt = (await session.inspect()).system_prompt or ""
        assert "## Budget" not in prompt
        usage = session.usage
        assert usage is not None and usage.limits == UsageBudget()


async def test_a_cancelled_call_counts_but_adds_no_tokens_and_the_turn_rolls_back() -> None:
    model = ScriptedModel([[Wait(30), Say("late")], [Say("next"), Finish(usage=Usage(7, 1))]])
    engine, session = await start(model, Harness.worker(max_model_calls=5))
    cancellation = AgentCancellation()
    async with engine, trio.open_nursery() as nursery:

        async def fire() -> None:
            # Fire once the turn is parked in the model's Wait: no timing guess.
            await trio.testing.wait_all_tasks_blocked()
            cancellation.cancel()

        nursery.start_soon(fire)
        with pytest.raises(TurnCancelled):
            await session.send_and_wait("go", cancellation=cancellation)
        assert [m.role for m in session.history] == ["system"]
        usage = session.usage
        assert usage is not None and (usage.model_calls, usage.total_tokens) == (1, 0)
        # The wrapped stream closed cleanly: the session runs its next turn.
        turn = await session.send_and_wait("again")
    assert turn.response.text == "next"
    usage = session.usage
    assert usage is not None and (usage.model_calls, usage.total_tokens) == (2, 8)
    assert usage.remaining_model_calls == 3
