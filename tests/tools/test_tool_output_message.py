"""ToolOutput.to_message builds the tool message without attrs' converters: it must be
exactly the message the checked constructor builds, and refuse what it refuses."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.model import ImagePart, InvalidMessage, Message, TextPart
from emelex.tools import ToolOutput


def test_the_fast_path_knows_every_field_of_message() -> None:
    # A new Message field must be set by the fast path too (then update this list).
    names = [field.name for field in attrs.fields(Message)]
    assert names == ["role", "content", "tool_calls", "tool_call_id", "reasoning"]


@given(
    texts=st.lists(st.text(max_size=20), max_size=3),
    image=st.booleans(),
    call_id=st.text(min_size=1, max_size=12),
)
def test_to_message_equals_the_checked_constructor(
    texts: list[str], image: bool, call_id: str
) -> None:
    parts: list[TextPart | ImagePart] = [TextPart(text) for text in texts]
    if image:
        parts.append(ImagePart(b"\x89PNG", "image/png"))
    output = ToolOutput(parts)
    built = output.to_message(call_id)
    checked = Message("tool", output.content, tool_call_id=call_id)
    assert built == checked
    assert hash(built) == hash(checked)
    assert repr(built) == repr(checked)


@pytest.mark.parametrize("call_id", ["", None, 3])
def test_a_bad_call_id_is_refused_as_before(call_id: object) -> None:
    with pytest.raises(InvalidMessage):
        ToolOutput("x").to_message(call_id)  # type: ignore[arg-type]


def test_content_that_is_not_parts_is_refused_as_before() -> None:
    with pytest.raises(InvalidMessage):
        ToolOutput([object()]).to_message("c")  # type: ignore[list-item]
