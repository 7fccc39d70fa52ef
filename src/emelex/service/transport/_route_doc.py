"""The OpenAPI-style document of the routes (``GET /v1/routes``), from ``emelex.contracts``.

Schemas are the contracts' own JSON Schema (``json_schema()``) under
``components.schemas``; each operation refers to its request and result contracts, and
each subscription names its request and update contracts.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from emelex._version import __version__
from emelex.contracts import WIRE_UNIONS, WIRE_VERSION, json_schema
from emelex.service.transport._routes import ROUTES, Route

_ERROR_STATUSES = {
    "400": "invalid body (schema or contract bound)",
    "401": "missing or wrong token",
    "404": "unknown session, interaction, invocation or route",
    "409": "operation conflict or settled interaction",
    "413": "body too large",
    "429": "queue full",
    "503": "Host closing",
}


def _name(contract: Any) -> str:
    for name, union in WIRE_UNIONS.items():
        if union == contract:
            return name
    return str(contract.__name__)


def _ref(contract: Any) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{_name(contract)}"}


def _operation(route: Route) -> dict[str, Any]:
    result = _ref(route.result)
    if route.nullable:
        result = {"oneOf": [result, {"type": "null"}]}
    errors = {
        status: {
            "description": text,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
        }
        for status, text in _ERROR_STATUSES.items()
    }
    return {
        "post": {
            "operationId": route.name,
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": _ref(route.request)}},
            },
            "responses": {
                "200": {
                    "description": "the result",
                    "content": {"application/json": {"schema": result}},
                },
                **errors,
            },
        }
    }


def _subscription(route: Route) -> dict[str, Any]:
    return {
        "get": {
            "operationId": route.name,
            "description": "WebSocket: send the request as the first text frame; each update "
            'arrives as {"update": ...}, the last frame is {"end": ...} or {"error": ...}.',
            "x-emelex-subscription": {"request": _ref(route.request), "update": _ref(route.result)},
            "responses": {"101": {"description": "switching to WebSocket"}},
        }
    }


@functools.cache
def _document_text() -> str:
    schemas = json_schema()["$defs"]
    schemas["ErrorBody"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["type", "message"],
                "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            }
        },
    }
    paths = {
        route.path: _operation(route) if route.kind == "op" else _subscription(route)
        for route in ROUTES
    }
    document = {
        "openapi": "3.1.0",
        "info": {"title": "emelex Host", "version": __version__, "x-wireVersion": WIRE_VERSION},
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
    # The contracts' schema refers to "#/$defs/..."; here they live under components.
    return json.dumps(document).replace('"#/$defs/', '"#/components/schemas/')


def route_document() -> dict[str, Any]:
    """The document as plain JSON values (a fresh copy each call)."""
    value: dict[str, Any] = json.loads(_document_text())
    return value
