"""The JSON Schema export: one draft 2020-12 document SDK generators can consume."""

from __future__ import annotations

import json
import subprocess
import sys

from jsonschema import Draft202012Validator

from emelex import contracts as c
from emelex.contracts.__main__ import main


def test_the_document_is_a_valid_draft_2020_12_schema_with_one_def_per_type() -> None:
    document = c.json_schema()
    Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["x-wireVersion"] == c.WIRE_VERSION
    assert set(c.WIRE_CLASSES) | set(c.WIRE_UNIONS) <= set(document["$defs"])
    for name in c.WIRE_CLASSES:
        definition = document["$defs"][name]
        assert definition["additionalProperties"] is False
        assert definition["required"] == list(definition["properties"])
    # Every reference resolves inside the document.
    text = json.dumps(document)
    for name in {part.split('"')[0] for part in text.split('"#/$defs/')[1:]}:
        assert name in document["$defs"], name


def test_tagged_unions_are_one_of_members_with_a_constant_kind() -> None:
    document = c.json_schema()
    members = document["$defs"]["WatchUpdate"]["oneOf"]
    kinds = [
        document["$defs"][member["$ref"].rsplit("/", 1)[1]]["properties"]["kind"]["const"]
        for member in members
    ]
    assert kinds == ["rows", "queue", "interactions", "end", "draft", "draftCleared"]


def test_bounds_appear_in_the_schema() -> None:
    defs = c.json_schema()["$defs"]
    assert defs["SearchRequest"]["properties"]["query"]["maxLength"] == c.MAX_QUERY_CHARS
    assert defs["HistoryPageRequest"]["properties"]["limit"]["maximum"] == c.MAX_PAGE_SIZE
    assert defs["OperationRef"]["maxLength"] == c.MAX_ID_CHARS
    validator = Draft202012Validator(c.schema_for("SearchRequest"))
    request = {
        "sessionId": "s",
        "query": "x" * (c.MAX_QUERY_CHARS + 1),
        "caseSensitive": False,
        "wholeWord": True,
        "through": None,
        "after": None,
        "limit": 10,
    }
    assert not validator.is_valid(request)
    assert validator.is_valid({**request, "query": "x"})


def test_python_m_emelex_contracts_schema_writes_the_document(tmp_path: object) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "emelex.contracts", "schema"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    assert json.loads(done.stdout) == c.json_schema()


def test_a_bad_command_line_is_a_usage_error(capsys: object) -> None:
    assert main([]) == 2
    assert main(["schema", "extra"]) == 2
