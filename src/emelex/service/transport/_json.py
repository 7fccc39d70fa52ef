"""Bounded JSON decoding for the transport: size and nesting are checked before parsing.

``json.loads`` recurses once per nesting level, so a body of 100,000 ``[`` would raise
``RecursionError`` deep inside the parser; the depth is measured first, on the raw
bytes, with string contents (where brackets mean nothing) removed.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Final

import orjson

from emelex.service._errors import InvalidRequest, RequestTooLarge

#: The deepest nesting of arrays and objects a request may use.
MAX_JSON_DEPTH: Final = 64

_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET: Final = bytes(b for b in range(256) if b not in b"[]{}")
_STEP: Final = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


def json_depth(raw: bytes) -> int:
    """The deepest bracket nesting of ``raw`` (brackets inside strings do not count)."""
    brackets = _STRING.sub(b'""', raw).translate(None, _NOT_BRACKET)
    return max(itertools.accumulate(_STEP[b] for b in brackets), default=0)


def parse_object(raw: bytes, *, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> dict[str, Any]:
    """The JSON object ``raw`` holds; typed errors for anything else."""
    if len(raw) > max_bytes:
        raise RequestTooLarge(f"the body holds {len(raw)} bytes; the Host accepts {max_bytes}")
    if json_depth(raw) > max_depth:
        raise InvalidRequest(f"the JSON nests deeper than {max_depth} levels")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidRequest("the body must be one JSON object")
    return value


def dump(value: Any) -> bytes:
    """Compact UTF-8 JSON (the wire never needs ASCII escapes)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def dump_fast(value: Any) -> str:
    """``dump`` for the hot paths (watch frames), as text: the same JSON values, through
    orjson; the standard library takes what orjson refuses (integers past 64 bits)."""
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        return dump(value).decode()


def load_fast(raw: bytes | str) -> Any:
    """``json.loads`` through orjson (nesting past its 1,024 levels is a ``ValueError``,
    never a ``RecursionError``). orjson reads an integer past 64 bits as a float, so a
    parse counts only when orjson writes the value back to the very same text (the
    Host's frames are orjson's compact output); the standard library parses the rest."""
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)
    try:
        if orjson.dumps(value) == (raw.encode() if isinstance(raw, str) else raw):
            return value
    except orjson.JSONEncodeError:
        pass
    return json.loads(raw)
