"""HostClient's own decoding: what a broken or hostile Host can send it."""

from __future__ import annotations

import pytest

from emelex.contracts import ContractLimitExceeded
from emelex.service import OperationConflict, ServiceError, TransportError
from emelex.service.transport._client import _decode, rebuild_error


def test_answers_are_bounded_json_objects() -> None:
    assert _decode(b"null") is None
    assert _decode('{"a": 1}') == {"a": 1}
    for hostile in (b"[" * 100_000 + b"]" * 100_000, b"[1]", b"{not json", b'"text"'):
        with pytest.raises(TransportError):
            _decode(hostile)


def test_error_answers_become_the_named_class() -> None:
    conflict = rebuild_error({"error": {"type": "OperationConflict", "message": "m"}}, 409)
    assert type(conflict) is OperationConflict and str(conflict) == "m"
    unknown = rebuild_error({"error": {"type": "SomethingNew", "message": "m"}}, 400)
    assert type(unknown) is ServiceError
    limit = rebuild_error(
        {
            "error": {
                "type": "ContractLimitExceeded",
                "message": "x",
                "limit": "page",
                "maximum": 500,
                "actual": 900,
            }
        },
        400,
    )
    assert isinstance(limit, ContractLimitExceeded) and limit.maximum == 500
    assert isinstance(rebuild_error("garbage", 500), TransportError)
