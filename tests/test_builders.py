"""Positional builders make the same values as the attrs constructor, without checks."""

from __future__ import annotations

import attrs
import pytest

from emelex._builders import positional_builder
from emelex.contracts import HistoryRow, Position


def test_a_built_value_equals_the_constructed_one() -> None:
    build = positional_builder(HistoryRow)
    position = positional_builder(Position)(3, 1)
    assert position == Position(source_sequence=3, item_index=1)
    built = build(position, "t1", "user", "hi", None, (), None, None, False)
    made = HistoryRow(
        position=Position(source_sequence=3, item_index=1),
        turn_id="t1",  # type: ignore[arg-type]
        role="user",
        body="hi",
        thinking=None,
        tool_calls=(),
        tool_call_id=None,
        tool_name=None,
        internal=False,
    )
    assert built == made and hash(built) == hash(made)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.body = "changed"  # type: ignore[misc]


def test_only_slotted_attrs_classes_have_builders() -> None:
    @attrs.define(slots=False)
    class Loose:
        x: int

    class Plain:
        pass

    for cls in (Loose, Plain):
        with pytest.raises(TypeError, match="not a slotted attrs class"):
            positional_builder(cls)
