"""A typed answer is unfenced in linear time: the fence regex it replaced backtracked
quadratically on a model's ```` ``` ```` followed by many newlines (8,000 took 1 s, and the
1,000,000-character answer bound would have held the event loop for hours)."""

from __future__ import annotations

import time

import pytest

from emelex.app._output import unfence


def test_many_newlines_after_a_fence_cost_linear_time() -> None:
    text = "```" + "\n" * 900_000 + "x"
    started = time.perf_counter()
    assert unfence(text) == text
    assert unfence(text + "```") == "\n" * 899_999 + "x"
    # Generous: linear work on 900 kB is milliseconds; the old pattern needed hours.
    assert time.perf_counter() - started < 1.0


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ('```json\n{"a": 1}\n```', '{"a": 1}\n'),
        ('```\n{"a": 1}```', '{"a": 1}'),
        ('```json  \n\n{"a": 1}\n```', '\n{"a": 1}\n'),
        ('```js on\n{"a": 1}\n```', '```js on\n{"a": 1}\n```'),  # not a language tag
        ('```{"a": 1}```', '```{"a": 1}```'),  # no line break after the opening fence
        ('{"a": 1}', '{"a": 1}'),
        ("```", "```"),
    ],
)
def test_fences_are_removed_as_before(text: str, body: str) -> None:
    assert unfence(text) == body
