"""JSON Schema (draft 2020-12) of every declaration, as one document with ``$defs``.

Generated from the same resolved field types and bounds the classes check, so the schema
and the Python checks cannot drift apart.
"""

from __future__ import annotations

from typing import Any, Final, Literal, get_args, get_origin

import attrs

from emelex.contracts._convert import camel
from emelex.contracts._version import WIRE_VERSION
from emelex.contracts._wire import (
    UNION_NAMES,
    WIRE_CLASSES,
    WIRE_STRINGS,
    WIRE_UNIONS,
    field_bounds,
    is_union,
)

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/$defs/{name}"}


def _type_schema(tp: Any, bounds: dict[str, Any]) -> dict[str, Any]:
    if tp is Any:
        return {}
    if tp is type(None):
        return {"type": "null"}
    if tp in WIRE_STRINGS:
        return _ref(WIRE_STRINGS[tp]["name"])
    if is_union(tp):
        arms = get_args(tp)
        rest = tuple(arm for arm in arms if arm is not type(None))
        named = UNION_NAMES.get(frozenset(rest))
        if named is not None and len(rest) > 1:
            inner = [_ref(named)]
        else:
            inner = [_type_schema(arm, bounds) for arm in rest]
        if len(rest) < len(arms):
            inner.append({"type": "null"})
        return inner[0] if len(inner) == 1 else {"anyOf": inner}
    origin = get_origin(tp)
    if origin is Literal:
        values = list(get_args(tp))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin is tuple:
        schema: dict[str, Any] = {"type": "array", "items": _type_schema(get_args(tp)[0], {})}
        if bounds.get("max_items") is not None:
            schema["maxItems"] = bounds["max_items"]
        if bounds.get("min_items"):
            schema["minItems"] = bounds["min_items"]
        return schema
    if origin is dict:
        return {"type": "object"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        schema = {"type": "integer", "minimum": bounds.get("minimum", 0)}
        if bounds.get("maximum") is not None:
            schema["maximum"] = bounds["maximum"]
        return schema
    if tp is str:
        schema = {"type": "string"}
        if bounds.get("max_len") is not None:
            schema["maxLength"] = bounds["max_len"]
        if bounds.get("min_len"):
            schema["minLength"] = bounds["min_len"]
        if bounds.get("pattern"):
            schema["pattern"] = bounds["pattern"]
        return schema
    if isinstance(tp, type) and attrs.has(tp):
        return _ref(tp.__name__)
    raise TypeError(f"no JSON Schema for {tp!r}")


def _class_schema(cls: type) -> dict[str, Any]:
    properties = {}
    for field in attrs.fields(cls):
        properties[camel(field.name)] = _type_schema(field.type, field_bounds(field))
    return {
        "type": "object",
        "description": " ".join((cls.__doc__ or "").split()),
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def json_schema() -> dict[str, Any]:
    """The whole wire contract as one JSON Schema document."""
    defs: dict[str, Any] = {}
    for info in WIRE_STRINGS.values():
        defs[info["name"]] = {
            "type": "string",
            "description": info["description"],
            "minLength": info["min_len"],
            "maxLength": info["max_len"],
            "pattern": info["pattern"],
        }
    for name, cls in WIRE_CLASSES.items():
        defs[name] = _class_schema(cls)
    for name, union in WIRE_UNIONS.items():
        defs[name] = {
            "description": "Told apart by the `kind` field.",
            "oneOf": [_ref(member.__name__) for member in get_args(union)],
        }
    return {
        "$schema": DIALECT,
        "$id": f"https://emelex.dev/schemas/contracts/v{WIRE_VERSION}.json",
        "title": "emelex agent service wire contracts",
        "description": f"Wire version {WIRE_VERSION}. Every type is a $defs entry.",
        "x-wireVersion": WIRE_VERSION,
        "$defs": dict(sorted(defs.items())),
    }


def schema_for(name: str) -> dict[str, Any]:
    """A self-contained schema validating one named type (its ``$defs`` entry)."""
    document = json_schema()
    if name not in document["$defs"]:
        raise KeyError(name)
    return {"$schema": DIALECT, "$defs": document["$defs"], "$ref": f"#/$defs/{name}"}
