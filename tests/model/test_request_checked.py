"""checked_request: the turn core's request builder skips only the per-message check."""

from __future__ import annotations

from typing import Any

import pytest

from emelex.model import (
    GenerationOptions,
    GenerationRequest,
    InvalidRequest,
    Message,
    ToolChoice,
    ToolDefinition,
)
from emelex.model._request import checked_request

TOOL = ToolDefinition("t", "a tool", {"type": "object"})
MESSAGES = (Message.system("be brief"), Message.user("hi"))


def test_same_request_as_the_checked_constructor() -> None:
    options = GenerationOptions(max_tokens=5)
    made = checked_request(MESSAGES, tools=(TOOL,), options=options)
    assert made == GenerationRequest(MESSAGES, tools=(TOOL,), options=options)
    assert type(made.messages) is tuple and made.messages is MESSAGES
    assert type(made.tools) is tuple


@pytest.mark.parametrize(
    ("messages", "tools", "options"),
    [
        ((), (TOOL,), GenerationOptions()),
        (MESSAGES, (TOOL, TOOL), GenerationOptions()),
        (MESSAGES, (), GenerationOptions(tool_choice=ToolChoice.REQUIRED)),
        (MESSAGES, (TOOL,), "not options"),
        (["not a message"], (), GenerationOptions()),  # not a tuple: fully checked
    ],
)
def test_everything_else_is_still_checked(messages: Any, tools: Any, options: Any) -> None:
    with pytest.raises(InvalidRequest):
        checked_request(messages, tools=tools, options=options)
    with pytest.raises(InvalidRequest):
        GenerationRequest(messages, tools=tools, options=options)
