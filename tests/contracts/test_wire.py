"""Round trips, strict decoding and construction-time bounds of every wire declaration."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

import emelex
from emelex import contracts as c
from emelex.contracts._convert import is_camel
from emelex.testing.contract_strategies import wire_values

NAMES = sorted([*c.WIRE_CLASSES, *c.WIRE_UNIONS])
SCHEMA = c.json_schema()


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator(c.schema_for(name))


VALIDATORS = {name: _validator(name) for name in NAMES}


def _wire_type(name: str) -> Any:
    return c.WIRE_CLASSES.get(name) or c.WIRE_UNIONS[name]


@pytest.mark.parametrize("name", NAMES)
@settings(
    max_examples=10, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)
@given(data=st.data())
def test_every_type_round_trips_through_json_and_fits_the_schema(
    name: str, data: st.DataObject
) -> None:
    value = data.draw(wire_values(name))
    wire = json.loads(json.dumps(c.to_wire(value)))
    assert wire == c.to_wire(value)
    VALIDATORS[name].validate(wire)
    assert c.from_wire(_wire_type(name), wire) == value


@pytest.mark.parametrize("name", sorted(c.WIRE_CLASSES))
def test_wire_keys_are_the_camel_case_attribute_names(name: str) -> None:
    properties = SCHEMA["$defs"][name]["properties"]
    assert all(is_camel(key) for key in properties)
    cls = c.WIRE_CLASSES[name]
    snake = [field.name for field in attrs.fields(cls)]
    assert list(properties) == [c._convert.camel(field) for field in snake]


def test_positions_and_addresses_have_the_spec_shape() -> None:
    position = c.Position(source_sequence=7, item_index=2)
    assert c.to_wire(position) == {"sourceSequence": 7, "itemIndex": 2}
    assert c.to_wire(c.EventAddress(sequence=9)) == {"kind": "event", "sequence": 9}
    row = c.RowAddress(position=position, field="thinking")
    assert c.to_wire(row) == {
        "kind": "row",
        "position": {"sourceSequence": 7, "itemIndex": 2},
        "field": "thinking",
        "call": None,  # every field is on the wire; only toolArguments names a call
    }
    assert c.from_wire(c.HistoryTarget, {"kind": "event", "sequence": 9}) == c.EventAddress(
        sequence=9
    )
    # Rows order by their emitting event, then their ordinal in it.
    assert c.Position(source_sequence=7, item_index=9) < c.Position(source_sequence=8, item_index=0)


def test_attachment_metadata_has_the_spec_shape_and_spans_follow_lengths() -> None:
    digest = c.Digest("sha256:" + "ab" * 32)
    metas = tuple(
        c.AttachmentMeta(name=name, mime_type="text/plain", bytes=size, digest=digest)
        for name, size in (("a.txt", 3), ("empty", 0), ("b.md", 5))
    )
    assert c.to_wire(metas[0]) == {
        "name": "a.txt",
        "mimeType": "text/plain",
        "bytes": 3,
        "digest": digest,
    }
    assert c.attachment_spans(metas) == ((0, 3), (3, 3), (3, 8))


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth):
        value = [value]
    return value


def _page_wire() -> dict[str, Any]:
    return {
        "sessionId": "s-1",
        "through": None,
        "after": {"sourceSequence": 3, "itemIndex": 0},
        "limit": 50,
    }


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda w: w.update(extra=1), "unknown fields ['extra']"),
        (lambda w: w.pop("limit"), "required fields missing: ['limit']"),
        (lambda w: w.pop("through"), "required fields missing: ['through']"),
        (lambda w: w.update(limit="50"), "expected an integer, got str"),
        (lambda w: w.update(limit=True), "expected an integer, got bool"),
        (lambda w: w.update(limit=0), "below the minimum 1"),
        (lambda w: w.update(sessionId="bad id"), "does not match"),
        (lambda w: w.update(sessionId="s-1\n"), "does not match"),
        (lambda w: w.update(after={"sourceSequence": -1, "itemIndex": 0}), "below the minimum"),
        (lambda w: w.update(after={"source_sequence": 1, "itemIndex": 0}), "unknown fields"),
        (lambda w: w.update(after=[1, 0]), "expected a Position object"),
    ],
)
def test_bad_wire_values_are_typed_contract_errors(change: Any, needle: str) -> None:
    wire = _page_wire()
    change(wire)
    with pytest.raises(c.ContractError) as caught:
        c.from_wire(c.HistoryPageRequest, wire)
    assert isinstance(caught.value, emelex.EmelexError)
    assert needle in str(caught.value)
    # The schema refuses what the converter refuses (except a trailing newline: Python's
    # `re`, which jsonschema uses, lets `$` match before it; ECMA 262 regexes do not).
    if not wire["sessionId"].endswith("\n"):
        assert not VALIDATORS["HistoryPageRequest"].is_valid(wire)


def test_an_unknown_union_kind_is_refused() -> None:
    with pytest.raises(c.ContractError, match="unknown kind 'file'"):
        c.from_wire(c.HistoryTarget, {"kind": "file", "sequence": 1})
    with pytest.raises(c.ContractError, match="required fields missing: \\['kind'\\]"):
        c.from_wire(c.EventAddress, {"sequence": 1})


def test_arrays_are_not_strings_and_tuples_freeze_lists() -> None:
    with pytest.raises(c.ContractError, match="expected an array"):
        c.from_wire(
            c.QueueSnapshot, {"sessionId": "s", "revision": 1, "entries": "abc", "settled": []}
        )
    entries: Any = []  # a list from a caller is frozen to a tuple
    snapshot = c.QueueSnapshot(session_id=c.SessionId("s"), revision=1, entries=entries)
    assert snapshot.entries == ()


@pytest.mark.parametrize(
    ("build", "limit", "maximum"),
    [
        (
            lambda: c.HistoryPageRequest(
                session_id=c.SessionId("s"), through=None, after=None, limit=501
            ),
            "HistoryPageRequest.limit",
            c.MAX_PAGE_SIZE,
        ),
        (
            lambda: c.SearchRequest(
                session_id=c.SessionId("s"),
                query="q" * (c.MAX_QUERY_CHARS + 1),
                case_sensitive=True,
                whole_word=False,
                through=None,
                after=None,
                limit=10,
            ),
            "search query",
            c.MAX_QUERY_CHARS,
        ),
        (
            lambda: c.AgentConfig(
                name=c.AgentName("a" * 256),
                description="",
                version="1",
                model=c.ModelConfig(binding="default", max_tokens=None),
                harness="worker",
                workspace=c.WorkspaceConfig(policy="readOnly", hidden=(), recursive_delete=False),
                tools=(),
            ),
            "AgentName",
            c.MAX_NAME_CHARS,
        ),
        (
            lambda: c.ExecuteRequest(
                agent=c.AgentName("writer"),
                text="go",
                attachments=tuple(
                    c.AttachmentMeta(
                        name=f"f{index}",
                        mime_type="application/octet-stream",
                        bytes=c.MAX_ATTACHMENT_BYTES // 2 + 1,
                        digest=c.Digest("sha256:" + "0" * 64),
                    )
                    for index in range(2)
                ),
                operation=c.OperationRef("op-1"),
            ),
            "attachment bytes",
            c.MAX_ATTACHMENT_BYTES,
        ),
    ],
)
def test_bounds_are_checked_at_construction(build: Any, limit: str, maximum: int) -> None:
    with pytest.raises(c.ContractLimitExceeded) as caught:
        build()
    assert isinstance(caught.value, emelex.LimitExceeded)
    assert (caught.value.limit, caught.value.maximum) == (limit, maximum)


def test_a_bound_on_the_wire_keeps_its_limit_type_and_path() -> None:
    wire = {**_page_wire(), "limit": 10_000}
    with pytest.raises(c.ContractLimitExceeded) as caught:
        c.from_wire(c.HistoryPageRequest, wire)
    assert caught.value.actual == 10_000
    assert any("@ $" in problem for problem in caught.value.problems)


@pytest.mark.parametrize("name", ["..", ".", "a/b", "a\\b", "a\nb", ""])
def test_attachment_names_are_file_names(name: str) -> None:
    with pytest.raises(c.ContractError):
        c.AttachmentMeta(
            name=name, mime_type="text/plain", bytes=1, digest=c.Digest("sha256:" + "0" * 64)
        )


def test_cross_field_rules() -> None:
    position = c.Position(source_sequence=1, item_index=0)
    with pytest.raises(c.ContractError, match="precedes"):
        c.SearchHit(position=position, field="body", start=5, end=4)
    with pytest.raises(c.ContractError, match="does not match \\^sha256"):
        c.from_wire(
            c.AttachmentMeta,
            {"name": "a", "mimeType": "text/plain", "bytes": 1, "digest": "md5:00"},
        )


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ({"a": {1, 2}}, "set is not a JSON value"),
        ({"a": b"x"}, "bytes is not a JSON value"),
        ({"a": float("nan")}, "not a JSON number"),
        ({"a": {1: "x"}}, "is not a string"),
        ({"deep": _nested(70)}, "nesting depth"),
    ],
)
def test_free_form_json_fields_hold_json_only(arguments: Any, needle: str) -> None:
    with pytest.raises(c.ContractError, match=needle):
        c.ToolCallInfo(id="call-1", name="read_file", arguments=arguments)
