"""The client's shape-checked decoding of the Host's frames (``_trusted_wire``).

It must build exactly what ``from_wire`` builds for every wire declaration (so a new
update kind flows through unchanged) and refuse malformed shapes with a typed error.
"""

from __future__ import annotations

import json
from typing import Any, Literal

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import emelex
from emelex import contracts as c
from emelex.contracts import decode_trusted
from emelex.testing.contract_strategies import wire_values

NAMES = sorted([*c.WIRE_CLASSES, *c.WIRE_UNIONS])


def _wire_type(name: str) -> Any:
    return c.WIRE_CLASSES.get(name) or c.WIRE_UNIONS[name]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=5, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_declaration_decodes_as_from_wire_does(name: str, data: st.DataObject) -> None:
    value = data.draw(wire_values(name))
    raw = json.loads(json.dumps(c.to_wire(value)))
    decoded = decode_trusted(_wire_type(name), raw)
    assert decoded == value == c.from_wire(_wire_type(name), raw)
    assert type(decoded) is type(value)
    assert c.to_wire(decoded) == raw
    # The Host's encoder gives the same JSON value, sharing no container with the value.
    encoded = c.encode_trusted(value)
    assert encoded == raw
    assert json.loads(json.dumps(encoded)) == raw
    assert _containers(encoded).isdisjoint(_inner(value))


def _containers(value: Any) -> set[int]:
    """The ids of every list and dict inside a JSON value (itself included)."""
    if isinstance(value, dict):
        return {id(value)}.union(*(_containers(v) for v in value.values()))
    if isinstance(value, list):
        return {id(value)}.union(*(_containers(v) for v in value))
    return set()


def _inner(value: Any) -> set[int]:
    """The ids of the dicts held (at any depth) by a declaration's fields."""
    if attrs.has(type(value)):
        return set().union(*(_inner(getattr(value, f.name)) for f in attrs.fields(type(value))))
    if isinstance(value, tuple | list):
        return set().union(*(_inner(v) for v in value))
    if isinstance(value, dict):
        return _containers(value)
    return set()


def _rows_wire() -> dict[str, Any]:
    return {
        "kind": "rows",
        "through": 4,
        "rows": [
            {
                "position": {"sourceSequence": 3, "itemIndex": 0},
                "turnId": "t-1",
                "role": "assistant",
                "body": "hello",
                "thinking": None,
                "toolCalls": [{"id": "c1", "name": "read", "arguments": {"path": ["a"]}}],
                "toolCallId": None,
                "toolName": None,
                "internal": False,
            }
        ],
        "nextAfter": {"sourceSequence": 3, "itemIndex": 0},
    }


def test_a_rows_update_builds_frozen_values() -> None:
    update = decode_trusted(c.WatchUpdate, _rows_wire())
    assert isinstance(update, c.RowsPublished)
    (row,) = update.rows
    assert isinstance(update.rows, tuple) and isinstance(row.tool_calls, tuple)
    assert row.tool_calls[0].arguments == {"path": ["a"]}
    assert row.position == c.Position(source_sequence=3, item_index=0)
    with pytest.raises(AttributeError):
        row.body = "changed"  # type: ignore[misc]


def _row(w: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = w["rows"][0]
    return row


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda w: w.update(extra=1), "unknown ['extra']"),
        (lambda w: w.pop("through"), "missing ['through']"),
        (lambda w: w.update(kind="nope"), "unknown kind 'nope'"),
        (lambda w: w.pop("kind"), "unknown kind None"),
        (lambda w: w.update(through="4"), "RowsPublished.through: expected an integer, got str"),
        (lambda w: w.update(through=True), "RowsPublished.through: expected an integer, got bool"),
        (lambda w: w.update(rows={}), "RowsPublished.rows: expected an array, got dict"),
        (lambda w: w.update(rows=[7]), "expected a HistoryRow object, got int"),
        (lambda w: _row(w).update(role="root"), "HistoryRow.role: 'root' is not one of"),
        (lambda w: _row(w).update(body=None), "HistoryRow.body: expected a string, got null"),
        (lambda w: _row(w).update(thinking=3), "HistoryRow.thinking: expected a string"),
        (lambda w: _row(w).update(internal=0), "HistoryRow.internal: expected a boolean, got int"),
        (lambda w: _row(w).update(toolCalls=[{"id": "c"}]), "ToolCallInfo missing"),
        (lambda w: _row(w)["toolCalls"][0].update(arguments=[]), "expected an object, got list"),
        (lambda w: w.update(nextAfter=[3, 0]), "expected a Position object, got list"),
    ],
)
def test_malformed_shapes_are_typed_contract_errors(change: Any, needle: str) -> None:
    raw = _rows_wire()
    change(raw)
    with pytest.raises(c.ContractError) as caught:
        decode_trusted(c.WatchUpdate, raw)
    assert isinstance(caught.value, emelex.EmelexError)
    assert needle in str(caught.value)


def test_a_top_level_value_that_is_not_an_object_is_refused() -> None:
    raw: Any
    for raw in (None, [], "rows", 3):
        with pytest.raises(c.ContractError, match="expected an object"):
            decode_trusted(c.WatchUpdate, raw)


@attrs.frozen(kw_only=True)
class _Pulse:
    """A stand-in for an update kind declared after this module was written."""

    kind: Literal["pulse"] = "pulse"
    beats: tuple[int, ...]
    note: str | None


# Not registered with the contracts (that would change their schema for other tests).
_Updates = c.RowsPublished | _Pulse


def test_a_new_update_kind_needs_no_change_here() -> None:
    raw = {"kind": "pulse", "beats": [1, 2], "note": None}
    assert decode_trusted(_Updates, raw) == _Pulse(beats=(1, 2), note=None)
    assert decode_trusted(_Updates, _rows_wire()) == c.from_wire(c.WatchUpdate, _rows_wire())
    with pytest.raises(c.ContractError, match=r"_Pulse.beats: expected an integer, got str"):
        decode_trusted(_Updates, {"kind": "pulse", "beats": ["1"], "note": None})
    # The Host's encoder, too, needs no change for a new kind.
    assert c.encode_trusted(_Pulse(beats=(1, 2), note=None)) == raw
