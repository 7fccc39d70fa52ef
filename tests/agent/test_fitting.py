"""Fitting requests under the resource ceilings (agent/_fitting.py, _ceilings.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex._ids import new_id
from emelex.agent import CeilingExceeded, ResourceCeilings
from emelex.agent._ceilings import first_excess, fit_to_ceilings, measure_messages
from emelex.agent._fitting import latest_round
from emelex.agent._history import validate_history
from emelex.model import Message, ToolCall


def tool_round(calls: int, text: str = "r") -> list[Message]:
    made = tuple(ToolCall(new_id(), "t", {"n": n}) for n in range(calls))
    return [
        Message("assistant", "", tool_calls=made),
        *(Message("tool", text, tool_call_id=call.id) for call in made),
    ]


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    """System prompt (maybe), earlier turns and a current turn ending in its user
    message or in a tool round."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message("system", "s" * draw(st.integers(0, 20))))
    for turn in range(draw(st.integers(0, 4))):
        messages.append(Message("user", "u" * draw(st.integers(1, 30))))
        for _ in range(draw(st.integers(0, 3))):
            messages.extend(tool_round(draw(st.integers(1, 3)), "x" * draw(st.integers(0, 30))))
        messages.append(Message("assistant", f"answer {turn}"))
    messages.append(Message("user", "now"))
    for _ in range(draw(st.integers(0, 3))):
        messages.extend(tool_round(draw(st.integers(1, 3)), "y" * draw(st.integers(0, 30))))
    return messages


@given(
    conversations(),
    st.integers(1, 40),
    st.integers(1, 400),
    st.integers(1, 60),
)
def test_a_fitted_request_is_valid_within_the_ceilings_and_keeps_what_it_must(
    messages: list[Message], max_messages: int, max_bytes: int, max_arguments: int
) -> None:
    ceilings = ResourceCeilings(
        max_messages=max_messages,
        max_message_bytes=max_bytes,
        max_tool_argument_bytes=max_arguments,
    )
    original = tuple(messages)
    try:
        fitted = fit_to_ceilings(original, measure_messages(original), 0, ceilings)
    except CeilingExceeded:
        # Only when what is always kept breaks a ceiling on its own.
        latest = latest_round(original)
        kept = [original[0]] if original[0].role == "system" else []
        kept += list(original[latest:])
        user = max(i for i in range(latest) if original[i].role == "user")
        kept.append(original[user])
        assert first_excess(measure_messages(kept), 0, ceilings) is not None
        return
    assert first_excess(measure_messages(fitted), 0, ceilings) is None
    validate_history(fitted, None)  # never a call without its result
    iterator = iter(original)
    assert all(any(m is o for o in iterator) for m in fitted)  # an ordered subset
    latest = latest_round(original)
    assert fitted[len(fitted) - (len(original) - latest) :] == original[latest:]
    if original[0].role == "system":
        assert fitted[0] is original[0]
    if first_excess(measure_messages(original), 0, ceilings) is None:
        assert fitted is original


def test_earlier_turns_go_first_then_earlier_rounds_of_this_turn() -> None:
    old = [Message("user", "old"), *tool_round(2), Message("assistant", "done")]
    first, second = tool_round(1), tool_round(1)
    current = [Message("user", "now"), *first, *second]
    messages = (Message("system", "s"), *old, *current)
    size = measure_messages(messages)
    fitted = fit_to_ceilings(messages, size, 0, ResourceCeilings(max_messages=6))
    assert fitted == (messages[0], *current)
    fitted = fit_to_ceilings(messages, size, 0, ResourceCeilings(max_messages=4))
    assert fitted == (messages[0], current[0], *second)


def test_schemas_are_never_fitted() -> None:
    messages = (Message("user", "hi"),)
    with pytest.raises(CeilingExceeded, match="max_schema_bytes"):
        fit_to_ceilings(
            messages, measure_messages(messages), 11, ResourceCeilings(max_schema_bytes=10)
        )
