"""Chat-template probing and rendering on real templates of several model families."""

from __future__ import annotations

import json
import re

import pytest

from emelex.model import (
    Capabilities,
    ImagePart,
    Message,
    Reasoning,
    ToolCall,
    ToolDefinition,
)
from emelex.model.llama import TINY_CHAT_TEMPLATE
from emelex.model.templates import (
    ChatTemplate,
    ChatTemplateError,
    ThinkMarkers,
    ToolCallFamily,
    UnsupportedContent,
    probe_chat_template,
    short_call_id,
)

from .conftest import template_text

T, F = True, False

# fixture: (system, tool declarations, tool history, thinking toggle, reasoning history),
# tool-call family, think tags known
EXPECTED = {
    "qwen2.5": ((T, T, T, F, F), ToolCallFamily.HERMES, F),
    "qwen3": ((T, T, T, T, F), ToolCallFamily.HERMES, T),
    "llama3.1": ((T, T, T, F, F), ToolCallFamily.LLAMA3_JSON, F),
    "mistral-v0.3": ((T, T, T, F, F), ToolCallFamily.MISTRAL, F),
    "deepseek-r1-distill": ((T, F, T, F, F), ToolCallFamily.NONE, T),
    "gemma3": ((T, F, F, F, F), ToolCallFamily.NONE, F),
    "gemma2": ((F, F, F, F, F), ToolCallFamily.NONE, F),
    "chatml": ((T, F, F, F, F), ToolCallFamily.NONE, F),
    "zephyr-drops-system": ((F, F, F, F, F), ToolCallFamily.NONE, F),
}

BOS, EOS = "<s>", "</s>"


def probe(name: str):  # type: ignore[no-untyped-def]
    return probe_chat_template(template_text(name), bos_token=BOS, eos_token=EOS)


def capabilities_tuple(capabilities: Capabilities) -> tuple[bool | None, ...]:
    return (
        capabilities.system_prompt,
        capabilities.tool_declarations,
        capabilities.tool_history,
        capabilities.thinking_toggle,
        capabilities.reasoning_history,
    )


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_probe_proves_each_capability_present_or_absent(name: str) -> None:
    flags, family, has_think = EXPECTED[name]
    chat_format = probe(name)
    assert capabilities_tuple(chat_format.capabilities) == flags
    assert chat_format.tool_family is family
    assert (chat_format.think is not None) is has_think


def test_tiny_model_template_proves_everything() -> None:
    chat_format = probe_chat_template(TINY_CHAT_TEMPLATE)
    assert chat_format.capabilities == Capabilities.all_proven()
    assert chat_format.tool_family is ToolCallFamily.HERMES
    assert chat_format.style.reasoning == "field"
    assert chat_format.style.thinking_variable == "enable_thinking"


def test_every_capability_has_a_fixture_that_lacks_it_and_one_that_has_it() -> None:
    columns = list(zip(*(flags for flags, _, _ in EXPECTED.values()), strict=True))
    probed_tiny = capabilities_tuple(probe_chat_template(TINY_CHAT_TEMPLATE).capabilities)
    for index, column in enumerate(columns):
        assert False in column, f"no fixture lacks capability {index}"
        assert True in (*column, probed_tiny[index]), f"no fixture has capability {index}"


def test_styles_found_by_probing() -> None:
    assert probe("mistral-v0.3").style.call_ids == "alnum9"
    assert probe("qwen2.5").style.call_ids == "native"
    assert probe("deepseek-r1-distill").style.arguments == "string"
    assert probe("qwen2.5").style.arguments == "object"
    assert probe("qwen3").style.thinking_variable == "enable_thinking"


def test_a_template_that_alters_the_system_prompt_is_not_credited() -> None:
    source = (
        "{% for m in messages %}<|{{ m.role }}|>{{ m.content | upper }}\n{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    assert probe_chat_template(source).capabilities.system_prompt is False


# -- rendering ---------------------------------------------------------------------------
WEATHER = ToolDefinition(
    "get_weather",
    "Weather for a city. Use <b>only</b> for cities & 'towns'.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CALL_ID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
HISTORY = [
    Message.system("You are terse."),
    Message.user("Weather in Paris?"),
    Message.assistant(tool_calls=[ToolCall(CALL_ID, "get_weather", {"city": "Paris"})]),
    Message.tool(CALL_ID, "sunny, 21 C"),
]


def test_qwen_renders_history_tools_and_generation_prompt() -> None:
    prompt = probe("qwen2.5").render(HISTORY, [WEATHER])
    assert prompt.text.startswith("<|im_start|>system\nYou are terse.\n\n# Tools")
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in prompt.text
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt.text
    assert prompt.text.endswith("<|im_start|>assistant\n")
    assert prompt.opens_reasoning is False


def test_tojson_does_not_html_escape() -> None:
    prompt = probe("qwen2.5").render(HISTORY, [WEATHER])
    assert "Use <b>only</b> for cities & 'towns'." in prompt.text


def test_mistral_gets_stable_nine_character_ids_on_both_sides() -> None:
    prompt = probe("mistral-v0.3").render(HISTORY[1:], [WEATHER])
    short = short_call_id(CALL_ID)
    assert re.fullmatch(r"[a-z0-9]{9}", short)
    assert short == short_call_id(CALL_ID)
    assert f'"id": "{short}"' in prompt.text
    assert f'"call_id": "{short}"' in prompt.text
    assert CALL_ID not in prompt.text
    assert prompt.text.startswith(BOS + "[AVAILABLE_TOOLS]")


def test_deepseek_gets_arguments_as_json_text_and_opens_reasoning() -> None:
    chat_format = probe("deepseek-r1-distill")
    prompt = chat_format.render(
        [Message.user("hi"), Message.assistant("Hello!", reasoning="greet back"), Message.user("x")]
    )
    assert prompt.opens_reasoning is True
    assert "greet back" not in prompt.text  # reasoning history proven absent: dropped
    history = chat_format.render(HISTORY[1:])
    assert json.dumps({"city": "Paris"}) in history.text


def test_qwen3_thinking_toggle() -> None:
    chat_format = probe("qwen3")
    off = chat_format.render([Message.user("hi")], reasoning=Reasoning.OFF)
    auto = chat_format.render([Message.user("hi")], reasoning=Reasoning.AUTO)
    default = chat_format.render([Message.user("hi")])
    assert off.text.endswith("<think>\n\n</think>\n\n")
    assert off.opens_reasoning is False
    assert auto.text == default.text
    assert auto.text.endswith("<|im_start|>assistant\n")
    assert chat_format.thinking_variables(Reasoning.budget(64)) == {"enable_thinking": True}


def test_tiny_template_opens_reasoning_when_thinking_is_on() -> None:
    chat_format = probe_chat_template(TINY_CHAT_TEMPLATE)
    assert chat_format.think == ThinkMarkers()
    assert chat_format.render([Message.user("hi")], reasoning=Reasoning.AUTO).opens_reasoning
    assert not chat_format.render([Message.user("hi")], reasoning=Reasoning.OFF).opens_reasoning
    kept = chat_format.render(
        [Message.user("a"), Message.assistant("b", reasoning="because"), Message.user("c")]
    )
    assert "<think>\nbecause\n</think>" in kept.text


def test_template_refusal_is_a_typed_error_with_the_templates_message() -> None:
    with pytest.raises(ChatTemplateError, match="roles must alternate") as caught:
        probe("gemma3").render([Message.user("a"), Message.user("b")])
    assert caught.value.raised_by_template is True


def test_media_content_is_refused() -> None:
    image = Message.user(["look", ImagePart(b"\x89PNG", "image/png")])
    with pytest.raises(UnsupportedContent, match="ImagePart"):
        probe("qwen2.5").render([image])


def test_syntax_error_is_reported_at_compile_time() -> None:
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")


def test_a_template_that_cannot_render_one_user_message_is_refused() -> None:
    with pytest.raises(ChatTemplateError, match="cannot render one user message"):
        probe_chat_template("{{ raise_exception('never') }}")


@pytest.mark.parametrize(
    "source",
    [
        "{{ messages.__class__.__mro__ }}",
        "{% set _ = messages.append(1) %}{{ messages }}",
        "{{ ''.__class__.__subclasses__() }}",
    ],
)
def test_the_sandbox_refuses_unsafe_operations(source: str) -> None:
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render([{"role": "user", "content": "x"}])


def test_environment_extras_match_the_hugging_face_one() -> None:
    source = (
        "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}"
        "{% if loop.index > 0 %}{% break %}{% endif %}{% endfor %}"
        "|{{ strftime_now('%Y') | length }}|{{ {'a': '<&>'} | tojson }}"
    )
    text = ChatTemplate(source).render([{"role": "user", "content": "x"}, {"role": "user"}])
    assert text == 'x|4|{"a": "<&>"}'
