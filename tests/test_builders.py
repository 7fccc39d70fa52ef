"""Positional builders make the same values as the attrs constructor, without checks."""

from __future__ import annotations

import attrs
import pytest

from emelex._builders import flat_builder, positional_builder
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


@attrs.frozen(weakref_slot=False)
class _Pair:
    left: int
    right: str | None


@attrs.frozen(weakref_slot=False)
class _Triple(_Pair):
    extra: bool


def test_classes_without_a_weakref_slot_are_built_through_a_twin() -> None:
    build = positional_builder(_Pair)
    assert "_twin" in build.__globals__  # the fast route: plain stores, then __class__
    built = build(3, None)
    assert type(built) is _Pair
    assert built == _Pair(3, None) and hash(built) == hash(_Pair(3, None))
    assert (built.left, built.right, repr(built)) == (3, None, "_Pair(left=3, right=None)")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.left = 4  # type: ignore[misc]
    # Distinct instances, none sharing state with another.
    other = build(5, "x")
    assert (built.left, other.left, other.right) == (3, 5, "x")


@attrs.frozen
class _WithWeakref:
    number: int


def test_other_layouts_use_the_slot_descriptors() -> None:
    """A __weakref__ slot or inherited slots: no twin fits, the values are the same."""
    assert "_twin" not in positional_builder(_WithWeakref).__globals__
    assert "_twin" in positional_builder(HistoryRow).__globals__  # wire classes: no weakref
    build = positional_builder(_Triple)
    assert "_twin" not in build.__globals__
    built = build(1, "a", True)
    assert type(built) is _Triple and built == _Triple(1, "a", True)


def test_the_store_row_values_take_the_fast_route() -> None:
    from emelex.store import Position as StorePosition
    from emelex.store import RowFields, StoredRow

    position = positional_builder(StorePosition)(4, 2)
    fields = positional_builder(RowFields)("tool", "out", None, "read_file", "c1", False)
    row = positional_builder(StoredRow)(position, "t1", fields, (), "{}")
    expected = RowFields("tool", "out", None, "read_file", "c1", False)
    assert row == StoredRow(StorePosition(4, 2), "t1", expected, (), "{}")
    for cls in (StorePosition, RowFields, StoredRow):
        assert "_twin" in positional_builder(cls).__globals__


def test_a_flat_builder_builds_nested_values_from_their_fields_in_place() -> None:
    from emelex.store import Position as StorePosition
    from emelex.store import RowFields, StoredRow

    build = flat_builder(StoredRow, position=StorePosition, fields=RowFields)
    row = build(4, 2, "t1", "tool", "out", None, "read_file", "c1", False, (), "{}")
    expected = RowFields("tool", "out", None, "read_file", "c1", False)
    assert row == StoredRow(StorePosition(4, 2), "t1", expected, (), "{}")
    assert type(row.position) is StorePosition and type(row.fields) is RowFields
    # The descriptor route nests the same way.
    history = flat_builder(HistoryRow, position=Position)(
        3, 1, "t1", "user", "hi", None, (), None, None, False
    )
    assert history == positional_builder(HistoryRow)(
        Position(source_sequence=3, item_index=1), "t1", "user", "hi", None, (), None, None, False
    )
    with pytest.raises(TypeError, match="no fields"):
        flat_builder(StoredRow, where=StorePosition)


def test_a_flat_builder_fills_fixed_fields_without_parameters() -> None:
    from emelex.contracts import SearchHit

    build = flat_builder(SearchHit, fixed={"field": "body", "call": None}, position=Position)
    hit = build(7, 0, 3, 9)
    at = Position(source_sequence=7, item_index=0)
    assert hit == SearchHit(position=at, field="body", start=3, end=9)
    assert type(hit) is SearchHit and type(hit.position) is Position
    with pytest.raises(TypeError, match="no fields"):
        flat_builder(SearchHit, fixed={"where": 1})
