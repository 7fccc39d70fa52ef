"""Parsing streamed output into answer text, reasoning and tool calls."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import ReasoningDelta, TextDelta, ToolCall
from emelex.model.llama import OutputParser, ParsedOutput
from emelex.model.templates import ThinkMarkers, ToolCallFamily

THINK = ThinkMarkers()


def run(
    pieces: list[str],
    *,
    family: ToolCallFamily = ToolCallFamily.NONE,
    think: ThinkMarkers | None = None,
    in_reasoning: bool = False,
) -> tuple[list[TextDelta | ReasoningDelta], ParsedOutput]:
    parser = OutputParser(family=family, think=think, in_reasoning=in_reasoning)
    events: list[TextDelta | ReasoningDelta] = []
    for piece in pieces:
        events += parser.feed(piece)
    last, output = parser.finish()
    return events + last, output


def check_deltas(events: list[TextDelta | ReasoningDelta], output: ParsedOutput) -> None:
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert text == output.text
    assert reasoning == (output.reasoning or "")


def chars(text: str) -> list[str]:
    return list(text)


def test_plain_text_passes_through_trimmed() -> None:
    events, output = run(["  Hello", ", world", "!\n\n"])
    assert output == ParsedOutput("Hello, world!", None, ())
    assert events == [TextDelta("Hello"), TextDelta(", world"), TextDelta("!")]


def test_think_block_becomes_reasoning() -> None:
    events, output = run(chars("<think>\nLet me see.\n</think>\n\nThe answer."), think=THINK)
    assert output == ParsedOutput("The answer.", "Let me see.", ())
    check_deltas(events, output)
    first_text = next(i for i, e in enumerate(events) if isinstance(e, TextDelta))
    assert all(isinstance(e, ReasoningDelta) for e in events[:first_text])


def test_reasoning_opened_by_the_prompt() -> None:
    events, output = run(["step one", "</th", "ink>", "done"], think=THINK, in_reasoning=True)
    assert output == ParsedOutput("done", "step one", ())
    check_deltas(events, output)


def test_unfinished_reasoning_stays_reasoning() -> None:
    _, output = run(["<think>", "still going"], think=THINK)
    assert output == ParsedOutput("", "still going", ())


def test_think_tags_mean_nothing_without_markers() -> None:
    _, output = run(["<think>x</think>y"])
    assert output.text == "<think>x</think>y"


def test_hermes_calls_are_parsed_and_text_around_them_kept() -> None:
    stream = (
        "Checking.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": "{\\"zone\\": \\"CET\\"}"}\n</tool_call>'
    )
    events, output = run(chars(stream), family=ToolCallFamily.HERMES)
    assert output.text == "Checking."
    assert output.tool_calls == (
        ToolCall("call_0", "get_weather", {"city": "Paris"}),
        ToolCall("call_1", "get_time", {"zone": "CET"}),
    )
    check_deltas(events, output)


def test_broken_hermes_call_is_kept_as_text() -> None:
    _, output = run(["<tool_call>{not json}</tool_call> ok"], family=ToolCallFamily.HERMES)
    assert output.tool_calls == ()
    assert output.text == "<tool_call>{not json}</tool_call> ok"


def test_unterminated_hermes_call_is_parsed_when_complete_json() -> None:
    _, output = run(['<tool_call>{"name": "f", "arguments": {}}'], family=ToolCallFamily.HERMES)
    assert output.tool_calls == (ToolCall("call_0", "f", {}),)
    _, cut = run(['<tool_call>{"name": "f", "argu'], family=ToolCallFamily.HERMES)
    assert cut.tool_calls == ()
    assert cut.text == '<tool_call>{"name": "f", "argu'


def test_hermes_markup_without_tools_is_text() -> None:
    _, output = run(['<tool_call>{"name": "f", "arguments": {}}</tool_call>'])
    assert output.tool_calls == ()
    assert output.text.startswith("<tool_call>")


def test_reasoning_then_hermes_call() -> None:
    stream = (
        '<think>I need the weather.</think>\n<tool_call>{"name": "w", "arguments": {}}</tool_call>'
    )
    events, output = run(chars(stream), family=ToolCallFamily.HERMES, think=THINK)
    assert output == ParsedOutput("", "I need the weather.", (ToolCall("call_0", "w", {}),))
    check_deltas(events, output)


def test_mistral_json_array() -> None:
    stream = (
        'Sure. [TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]'
    )
    events, output = run(chars(stream), family=ToolCallFamily.MISTRAL)
    assert output.text == "Sure."
    assert output.tool_calls == (ToolCall("call_0", "a", {"x": 1}), ToolCall("call_1", "b", {}))
    check_deltas(events, output)


def test_mistral_name_args_form() -> None:
    stream = '[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}[TOOL_CALLS]noop[ARGS]{}'
    _, output = run([stream], family=ToolCallFamily.MISTRAL)
    assert output.tool_calls == (
        ToolCall("call_0", "get_weather", {"city": "Oslo"}),
        ToolCall("call_1", "noop", {}),
    )


def test_broken_mistral_calls_are_text() -> None:
    _, output = run(["[TOOL_CALLS] [{broken"], family=ToolCallFamily.MISTRAL)
    assert output.tool_calls == ()
    assert output.text == "[TOOL_CALLS] [{broken"


def test_llama3_json_answer_is_a_call() -> None:
    stream = '  {"name": "get_weather", "parameters": {"city": "Rome"}}'
    events, output = run(chars(stream), family=ToolCallFamily.LLAMA3_JSON)
    assert output == ParsedOutput("", None, (ToolCall("call_0", "get_weather", {"city": "Rome"}),))
    assert events == []


def test_llama3_python_tag_and_several_calls() -> None:
    stream = (
        '<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"k": [1]}}'
    )
    _, output = run([stream[:5], stream[5:]], family=ToolCallFamily.LLAMA3_JSON)
    assert output.tool_calls == (ToolCall("call_0", "a", {}), ToolCall("call_1", "b", {"k": [1]}))


def test_llama3_json_that_is_not_a_call_is_text() -> None:
    _, output = run(['{"answer": 42}'], family=ToolCallFamily.LLAMA3_JSON)
    assert output == ParsedOutput('{"answer": 42}', None, ())
    _, prose = run(["The answer is {x}."], family=ToolCallFamily.LLAMA3_JSON)
    assert prose.text == "The answer is {x}."


def test_finish_twice_is_an_error() -> None:
    parser = OutputParser()
    parser.finish()
    with pytest.raises(RuntimeError):
        parser.finish()
    with pytest.raises(RuntimeError):
        parser.feed("x")


HERMES_SAMPLE = (
    'a<think>no</think> <tool_call>{"name": "f", "arguments": {"q": "<tool_call>"}}</tool_call>b  '
)
THINK_SAMPLE = (
    ' \n<think> r1 \n</think>\n\n answer <tool_call>{"name": "g", "arguments": {}}</tool_call>\n'
)
SAMPLES = {
    "hermes": (ToolCallFamily.HERMES, THINK, HERMES_SAMPLE),
    "think": (ToolCallFamily.HERMES, THINK, THINK_SAMPLE),
    "mistral": (
        ToolCallFamily.MISTRAL,
        None,
        'x [TOOL_C [TOOL_CALLS][{"name": "m", "arguments": {}}]',
    ),
    "llama": (ToolCallFamily.LLAMA3_JSON, None, '<|python_tag|>{"name": "l", "parameters": {}}'),
    "text": (ToolCallFamily.NONE, THINK, "<thin <think>é✓ 🙂</think>\t</think> end </thi"),
}


@pytest.mark.parametrize(("family", "think", "stream"), SAMPLES.values(), ids=SAMPLES.keys())
@given(data=st.data())
def test_any_split_gives_the_same_result(
    family: ToolCallFamily, think: ThinkMarkers | None, stream: str, data: st.DataObject
) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(stream) - 1)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    pieces = [stream[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    events, output = run(pieces, family=family, think=think)
    _, whole = run([stream], family=family, think=think)
    assert output == whole
    check_deltas(events, output)
    assert all(e.text for e in events)
