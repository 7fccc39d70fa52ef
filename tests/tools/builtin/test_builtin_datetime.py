"""datetime: RFC 3339 at fixed offsets, an injectable clock, strict offset syntax."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.agent import AgentCancellation
from emelex.model import ToolCall
from emelex.testing import Call
from emelex.tools import ToolInvocation
from emelex.tools.builtin import DateTimeTool
from emelex.tools.builtin._datetime import OFFSET_PATTERN, parse_offset, rfc3339

Runner = Callable[..., Awaitable[Any]]
INSTANT = 1_700_000_000.75  # 2023-11-14T22:13:20.75Z


async def _call(tool: DateTimeTool, offset: str) -> str:
    invocation = ToolInvocation(
        ToolCall("c", "datetime", {"utc_offset": offset}), AgentCancellation(), "t", "s"
    )
    output = await tool.invoke(invocation)
    assert output.is_error is False
    return output.text


@pytest.mark.parametrize(
    ("offset", "expected"),
    [
        ("Z", "2023-11-14T22:13:20Z"),
        ("+00:00", "2023-11-14T22:13:20+00:00"),
        ("+05:30", "2023-11-15T03:43:20+05:30"),
        ("-08:00", "2023-11-14T14:13:20-08:00"),
        ("+14:00", "2023-11-15T12:13:20+14:00"),
        ("-00:30", "2023-11-14T21:43:20-00:30"),
        ("+23:59", "2023-11-15T22:12:20+23:59"),
    ],
)
async def test_offsets(offset: str, expected: str) -> None:
    assert await _call(DateTimeTool(clock=lambda: INSTANT), offset) == expected


@pytest.mark.parametrize(
    "offset", ["z", "-00:00", "+24:00", "+5:30", "05:30", "+05:60", "+0530", "UTC", ""]
)
def test_bad_offsets_are_refused_by_schema_and_parser(offset: str) -> None:
    assert re.fullmatch(OFFSET_PATTERN, offset) is None
    with pytest.raises(ValueError, match="invalid UTC offset"):
        parse_offset(offset)


@given(
    seconds=st.integers(min_value=0, max_value=253_402_300_799 - 86_400),
    minutes=st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59),
)
def test_rfc3339_round_trips(seconds: int, minutes: int) -> None:
    sign = "-" if minutes < 0 and minutes != 0 else "+"
    offset = f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"
    text = rfc3339(seconds, parse_offset(offset))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d", text)
    parsed = dt.datetime.fromisoformat(text)
    assert parsed.timestamp() == seconds
    assert parsed.utcoffset() == dt.timedelta(minutes=minutes)


async def test_datetime_is_opt_in_and_needs_no_approval(run_calls: Runner) -> None:
    off = await run_calls([Call("datetime", {"utc_offset": "Z"})])
    assert "datetime" not in off.advertised

    outcome = await run_calls(
        [Call("datetime", {"utc_offset": "+05:30"}), Call("datetime", {"utc_offset": "+5:30"})],
        configure=lambda builder: builder.include_datetime(True),
    )
    assert "datetime" in outcome.advertised
    assert outcome.reasons == []
    now, bad = outcome.tool_messages
    parsed = dt.datetime.fromisoformat(now)
    assert parsed.utcoffset() == dt.timedelta(hours=5, minutes=30)
    assert abs(parsed.timestamp() - dt.datetime.now(dt.UTC).timestamp()) < 60
    assert "invalid arguments at utc_offset" in bad
    assert outcome.executed == [True, False]
