"""The rules every tool definition follows, in one place: the name rule, the schema check
and the compiled argument validator.

The session's tool table, the application's agent description, ``FunctionTool`` and
MCP discovery all check declarations with these functions, so a name or schema accepted
in one place is accepted everywhere. Each caller wraps the returned explanation in its
own error type (or warning), since what a bad declaration means differs by layer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final, final

import jsonschema
import jsonschema.exceptions
import jsonschema.protocols
import jsonschema.validators

from emelex._text import shorten

#: Tool names the harness accepts: 1-64 letters, digits, ``_ . -``, not starting with
#: ``.`` or ``-`` (provider APIs accept this set; file names built from it stay tame).
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: How :data:`TOOL_NAME` reads in error messages.
TOOL_NAME_RULE: Final = "1-64 letters, digits, _ . -"
#: Longest validation message returned to the model for one invalid call.
MAX_VALIDATION_MESSAGE: Final = 600


def tool_name_problem(name: object) -> str | None:
    """None when ``name`` is a valid tool name, else why not."""
    if isinstance(name, str) and TOOL_NAME.fullmatch(name):
        return None
    return f"tool name {name!r} must be {TOOL_NAME_RULE}"


def validator_class(schema: Mapping[str, Any]) -> type[jsonschema.protocols.Validator]:
    """The validator class ``schema`` declares through ``$schema`` (draft 2020-12 when
    it declares none)."""
    cls: type[jsonschema.protocols.Validator] = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft202012Validator
    )
    return cls


def tool_schema_problem(schema: object) -> str | None:
    """None when ``schema`` can describe a tool's arguments (a JSON Schema object whose
    ``type``, if given, is ``"object"``), else why not."""
    if not isinstance(schema, Mapping):
        return "parameters must be a JSON Schema object"
    if schema.get("type", "object") != "object":
        return "parameters must be an object schema"
    try:
        validator_class(schema).check_schema(dict(schema))
    except jsonschema.exceptions.SchemaError as exc:
        return f"invalid JSON Schema: {exc.message}"
    return None


@final
class ArgumentValidator:
    """A tool's argument schema compiled once (a validator per call costs about 50 times more:
    the schema itself would be re-checked every time). The schema must have passed
    :func:`tool_schema_problem`."""

    __slots__ = ("_validator",)

    def __init__(self, schema: Mapping[str, Any]) -> None:
        self._validator = validator_class(schema)(schema)

    def problem(self, arguments: Mapping[str, Any]) -> str | None:
        """None when ``arguments`` satisfy the schema, else a bounded explanation that
        names where the first relevant error is."""
        error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        if error is None:
            return None
        where = "/".join(str(step) for step in error.absolute_path) or "(root)"
        return shorten(f"invalid arguments at {where}: {error.message}", MAX_VALIDATION_MESSAGE)


__all__ = [
    "MAX_VALIDATION_MESSAGE",
    "TOOL_NAME",
    "TOOL_NAME_RULE",
    "ArgumentValidator",
    "tool_name_problem",
    "tool_schema_problem",
    "validator_class",
]
