"""Building blocks of the native backend: UTF-8 decoding, stop strings, GGUF metadata
and tool-call grammars (including that llama.cpp accepts every grammar built)."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    Reasoning,
    ToolDefinition,
)
from emelex.model.llama import (
    TINY_CHAT_TEMPLATE,
    GrammarError,
    LlamaModel,
    ModelLoadError,
    read_gguf_metadata,
    schema_grammar,
    tool_call_grammar,
)
from emelex.model.llama._grammar import gbnf_literal
from emelex.model.llama._stops import StopScanner
from emelex.model.llama._utf8 import Utf8Decoder
from emelex.model.templates import ThinkMarkers, ToolCallFamily


def split(data: Any, cuts: list[int]) -> list[Any]:
    bounds = [0, *sorted(set(cuts)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


# -- UTF-8 ------------------------------------------------------------------------------
@given(st.text(), st.lists(st.integers(0, 64), max_size=10))
def test_valid_utf8_decodes_exactly_under_any_split(text: str, cuts: list[int]) -> None:
    data = text.encode("utf-8")
    decoder = Utf8Decoder()
    out = "".join(
        decoder.decode(piece) for piece in split(data, [c for c in cuts if c <= len(data)])
    )
    assert out + decoder.decode(b"", final=True) == text


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"a\x80b", "a\ufffdb"),  # lone continuation byte
        (b"\xc1\xa9", "i"),  # overlong spelling of "i", read as llama.cpp reads it
        (b"\xe0\x81\x81", "A"),  # overlong three-byte spelling of "A"
        (b"\xed\xb3\xb5x", "\ufffdx"),  # a surrogate cannot live in a str
        (b"\xf8\xbc\xbd\x99", "\ufffd"),  # past U+10FFFF
        (b"\xc3(", "\ufffd("),  # lead byte without its continuation
        (b"ok\xe2\x9c", "ok\ufffd"),  # unfinished at the end
    ],
)
def test_malformed_bytes_decode_like_llama_cpps_grammar(data: bytes, expected: str) -> None:
    assert Utf8Decoder().decode(data, final=True) == expected


def test_an_unfinished_character_is_carried_to_the_next_piece() -> None:
    decoder = Utf8Decoder()
    assert decoder.decode(b"\xf0\x9f") == ""
    assert decoder.decode(b"\x99\x82!") == "🙂!"
    decoder.decode(b"\xe2")
    decoder.reset()
    assert decoder.decode(b"x") == "x"


# -- stop strings ---------------------------------------------------------------------------
@given(
    st.text(alphabet="abcXY", max_size=30),
    st.lists(st.text(alphabet="abcXY", min_size=1, max_size=3), min_size=1, max_size=3),
    st.lists(st.integers(0, 30), max_size=8),
)
def test_stop_strings_cut_at_the_first_match_under_any_split(
    text: str, stops: list[str], cuts: list[int]
) -> None:
    hits = [text.find(stop) for stop in stops if stop in text]
    expected = text[: min(hits)] if hits else text
    scanner = StopScanner(stops)
    out, stopped = "", False
    for piece in split(text, [c for c in cuts if c <= len(text)]):
        emitted, stopped = scanner.feed(piece)
        out += emitted
        if stopped:
            break
    if not stopped:
        rest, stopped = scanner.flush()
        out += rest
    assert stopped == bool(hits)
    assert out == expected  # held-back text makes the split invisible


def test_no_stop_strings_pass_everything_through() -> None:
    scanner = StopScanner(())
    assert scanner.feed("abc") == ("abc", False)
    assert scanner.flush() == ("", False)


def test_a_longer_stop_string_that_starts_earlier_wins() -> None:
    # "a" matches first in "Xa", but "XaX" starts earlier and completes with the next text.
    scanner = StopScanner(["a", "XaX"])
    assert scanner.feed("Xa") == ("", False)
    assert scanner.feed("X") == ("", True)
    scanner = StopScanner(["a", "XaX"])
    assert scanner.feed("Xa") == ("", False)
    assert scanner.feed("Y") == ("X", True)  # the longer one did not complete: cut at "a"
    scanner = StopScanner(["a", "XaX"])
    assert scanner.feed("Xa") == ("", False)
    assert scanner.flush() == ("X", True)


# -- GGUF metadata --------------------------------------------------------------------------
def test_metadata_of_the_tiny_model(tiny_model: Path) -> None:
    metadata = read_gguf_metadata(tiny_model)
    assert metadata.architecture == "llama"
    assert metadata.name == "emelex-tiny"
    assert metadata.chat_template == TINY_CHAT_TEMPLATE
    assert (metadata.bos_token, metadata.eos_token) == ("<s>", "<|im_end|>")
    assert metadata.context_length == 4096
    assert metadata.token_count > 256


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "cannot read"),
        (b"GGUF\x01\x00\x00\x00" + b"\x00" * 16, "too old"),
        (b"GGUF\x03\x00\x00\x00" + b"\x00" * 8 + b"\x01" + b"\x00" * 7 + b"\x05", "truncated"),
        (b"GGML" + b"\x00" * 32, "bad magic"),
    ],
)
def test_broken_headers_are_load_errors(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "broken.gguf"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        read_gguf_metadata(path)


def test_a_truncated_model_file_is_a_load_error(tiny_model: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_model.read_bytes()[:5000])
    with pytest.raises(ModelLoadError):
        read_gguf_metadata(cut)


# -- grammars -------------------------------------------------------------------------------
def test_literals_are_escaped() -> None:
    assert gbnf_literal('a"b\\c\nd\te') == '"a\\"b\\\\c\\nd\\te"'
    grammar = schema_grammar({"enum": ['quote"', "new\nline", 3, None]})
    assert '"\\"quote\\\\\\"\\""' in grammar
    assert '"null"' in grammar


def test_rule_names_are_sanitised_and_unique() -> None:
    tools = [
        ToolDefinition(
            "get weather!", "", {"type": "object", "properties": {"a b": {"type": "string"}}}
        ),
        ToolDefinition("get-weather", "", {"type": "object", "properties": {}}),
    ]
    grammar = tool_call_grammar(ToolCallFamily.HERMES, tools).text
    names = re.findall(r"^([^ ]+) ::=", grammar, re.MULTILINE)
    assert len(names) == len(set(names))
    assert all(re.fullmatch(r"[a-z0-9-]+", name) for name in names)


def test_family_markup_and_triggers() -> None:
    tool = [ToolDefinition("f", "", {"type": "object", "properties": {}})]
    hermes = tool_call_grammar(ToolCallFamily.HERMES, tool)
    assert '"<tool_call>"' in hermes.text and hermes.triggers
    assert re.fullmatch(hermes.triggers[0], 'hi <tool_call>{"name"')
    assert not re.fullmatch(hermes.triggers[0], "hi there")
    mistral = tool_call_grammar(ToolCallFamily.MISTRAL, tool)
    assert mistral.text.startswith('root ::= "[TOOL_CALLS]"')
    llama = tool_call_grammar(ToolCallFamily.LLAMA3_JSON, tool)
    assert '"\\"parameters\\""' in llama.text
    assert re.fullmatch(llama.triggers[0], '  {"name": "f"')
    assert not re.fullmatch(llama.triggers[0], "Sure {")
    required = tool_call_grammar(ToolCallFamily.HERMES, tool, required=True)
    assert required.triggers == ()
    with pytest.raises(GrammarError):
        tool_call_grammar(ToolCallFamily.NONE, tool)
    with pytest.raises(GrammarError):
        tool_call_grammar(ToolCallFamily.HERMES, [])


def test_a_trigger_inside_reasoning_does_not_start_the_grammar() -> None:
    tool = [ToolDefinition("f", "", {"type": "object", "properties": {}})]
    lazy = tool_call_grammar(ToolCallFamily.HERMES, tool, think=ThinkMarkers())
    (trigger,) = lazy.triggers
    assert not re.fullmatch(trigger, "<think>maybe <tool_call> here")
    assert re.fullmatch(trigger, "<think>maybe <tool_call></think> <tool_call>{")
    assert re.fullmatch(trigger, "no thinking <tool_call>{")
    opened = tool_call_grammar(
        ToolCallFamily.HERMES, tool, think=ThinkMarkers(), starts_in_reasoning=True
    )
    assert not re.fullmatch(opened.triggers[0], "thinking <tool_call>")
    assert re.fullmatch(opened.triggers[0], "thinking</think><tool_call>")
    forced = tool_call_grammar(
        ToolCallFamily.HERMES, tool, think=ThinkMarkers(), starts_in_reasoning=True, required=True
    )
    assert forced.text.startswith('root ::= "</think>"')
    assert re.fullmatch(forced.triggers[0], "I will call </think>")


# Random JSON Schemas of the supported vocabulary: llama.cpp must parse every grammar
# built from them, and whatever a random model writes under it must validate.
def random_schema(rng: random.Random, depth: int = 0) -> dict[str, Any]:
    leaves: list[Callable[[], dict[str, Any]]] = [
        lambda: {"type": "string", "maxLength": rng.randint(0, 5)},
        lambda: {"type": "string", "minLength": 1, "maxLength": 3},
        lambda: {"type": "integer"},
        lambda: {"type": "integer", "minimum": rng.choice([0, 1])},
        lambda: {"type": "number", "minimum": 0},
        lambda: {"type": "boolean"},
        lambda: {"type": "null"},
        lambda: {"enum": rng.sample(["a", 'b"', 1, None, True, "new\nline"], rng.randint(1, 3))},
        lambda: {"const": rng.choice(["x", 0, False, [1], {"k": "v"}])},
        lambda: {"type": ["boolean", "null"]},
    ]
    if depth >= 2 or rng.random() < 0.4:
        return rng.choice(leaves)()
    kind = rng.choice(["object", "array", "anyOf", "ref"])
    if kind == "object":
        names = rng.sample(["a", "b", "c d", "é", "x-y"], rng.randint(1, 3))
        return {
            "type": "object",
            "properties": {name: random_schema(rng, depth + 1) for name in names},
            "required": rng.sample(names, rng.randint(0, len(names))),
        }
    if kind == "array":
        low = rng.randint(0, 2)
        return {
            "type": "array",
            "items": random_schema(rng, depth + 1),
            "minItems": low,
            "maxItems": low + rng.randint(0, 2),
        }
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1), random_schema(rng, depth + 1)]}
    return {"$ref": "#/$defs/shared"}


def shared_definition(rng: random.Random) -> dict[str, Any]:
    while True:  # a definition that is only a reference to itself validates nothing
        schema = random_schema(rng, 1)
        if "$ref" not in schema:
            return schema


def test_degenerate_reference_cycles_do_not_make_left_recursion() -> None:
    schema = {
        "$ref": "#/$defs/a",
        "$defs": {"a": {"anyOf": [{"$ref": "#/$defs/a"}, {"type": "boolean"}]}},
    }
    grammar = schema_grammar(schema)
    assert "v-ref-a ::= v-def-a" in grammar
    assert "v-def-a ::= value | boolean" in grammar
    nested = {
        "$ref": "#/$defs/n",
        "$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}},
    }
    assert "v-ref-n" in schema_grammar(nested).split("v-def-n ::=")[1]


async def test_generated_grammars_are_accepted_and_constrain_to_valid_arguments(
    tiny_model: Path,
) -> None:
    rng = random.Random(20261130)
    validated = 0
    async with LlamaModel(
        tiny_model, tool_choice="required", n_threads=1, n_threads_batch=1
    ) as model:
        for round_ in range(16):
            schema: dict[str, Any] = {
                "type": "object",
                "properties": {"p": random_schema(rng), "q": random_schema(rng)},
                "required": ["p"],
                "$defs": {"shared": shared_definition(rng)},
            }
            jsonschema.Draft202012Validator.check_schema(schema)
            request = GenerationRequest(
                [Message.user("go")],
                tools=[ToolDefinition("t", "", schema)],
                options=GenerationOptions(
                    max_tokens=160, temperature=1.0, seed=round_, reasoning=Reasoning.OFF
                ),
            )
            async with model.generate(request) as stream:
                events = [event async for event in stream]
            final = events[-1]
            assert isinstance(final, Completed)
            validator = jsonschema.Draft202012Validator(schema)
            for call in final.response.tool_calls:
                assert call.name == "t"
                validator.validate(call.arguments)
                validated += 1
            if final.response.finish_reason == "tool_calls":
                assert final.response.tool_calls
    assert validated >= 16  # the model did write calls, not only cut-off answers
