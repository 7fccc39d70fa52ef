"""Python type hints to JSON Schema, for tools declared from typed functions.

:func:`schema_for` maps one annotation to a JSON Schema fragment. Supported:

* ``str``, ``int``, ``float``, ``bool``, ``None`` and ``typing.Any`` (no constraint);
* ``Literal[...]`` of JSON scalars and ``enum.Enum`` subclasses with JSON scalar values
  (the schema lists the values; arguments are converted to the member);
* ``X | None`` / ``Optional[X]`` and other unions (``anyOf``);
* ``list[X]``, ``Sequence[X]``, ``set[X]``/``frozenset[X]`` (``uniqueItems``),
  ``tuple[X, ...]`` and fixed ``tuple[X, Y]`` (``prefixItems``);
* ``dict[str, X]`` / ``Mapping[str, X]`` (``additionalProperties``);
* attrs classes, dataclasses and ``TypedDict`` classes (closed objects:
  ``additionalProperties: false``; required when a field has no default);
* ``Annotated[X, "description"]``: the first string in the metadata becomes the
  fragment's ``description``; other metadata is ignored.

Anything else (type variables, ``bytes``, ``datetime``, arbitrary classes, recursive
classes) raises :class:`UnsupportedAnnotation`, a :class:`TypeError`.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from emelex.tools._errors import InvalidToolFunction, UnsupportedAnnotation

#: JSON Schema dialect of every generated tool schema.
_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_SEQUENCES = (
    list,
    collections.abc.Sequence,
    collections.abc.MutableSequence,
    collections.abc.Iterable,
    collections.abc.Collection,
)
_SETS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)


def unwrap_annotated(annotation: Any) -> tuple[Any, str | None]:
    """``(inner type, description)`` for ``Annotated[T, "text", ...]``; else ``(T, None)``."""
    if typing.get_origin(annotation) is typing.Annotated:
        inner, *metadata = typing.get_args(annotation)
        description = next((item for item in metadata if isinstance(item, str)), None)
        inner, nested = unwrap_annotated(inner)
        return inner, description if description is not None else nested
    return annotation, None


def contains_type_var(annotation: Any) -> bool:
    """Whether a TypeVar (or ParamSpec / TypeVarTuple) occurs anywhere in ``annotation``."""
    if isinstance(annotation, typing.TypeVar | typing.ParamSpec | typing.TypeVarTuple):
        return True
    return any(contains_type_var(arg) for arg in typing.get_args(annotation))


def _json_scalar(value: object) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def _is_typeddict(annotation: Any) -> bool:
    return isinstance(annotation, type) and typing.is_typeddict(annotation)


def json_default(value: object) -> tuple[bool, Any]:
    """``(True, value)`` when a default can be shown in a schema as plain JSON."""
    if isinstance(value, enum.Enum):
        value = value.value
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    return True, value


TypedDictSeen = Callable[[type, dict[str, Any], frozenset[str]], None]
"""Called with each TypedDict class met, its resolved field types and required keys."""


def schema_for(
    annotation: Any,
    *,
    description: str | None = None,
    localns: Mapping[str, Any] | None = None,
    on_typeddict: TypedDictSeen | None = None,
) -> dict[str, Any]:
    """The JSON Schema fragment for ``annotation`` (see the module docstring).

    ``localns`` resolves string annotations of classes defined in a local scope.
    ``on_typeddict`` learns the resolved fields of every TypedDict met (a converter
    can structure them from that, whatever the Python version makes of
    ``NotRequired`` under postponed annotations).
    """
    schema = _Builder(localns, on_typeddict).build(annotation, "")
    if description and "description" not in schema:
        schema["description"] = description
    return schema


def object_schema(
    properties: dict[str, dict[str, Any]], required: list[str], *, closed: bool = True
) -> dict[str, Any]:
    """A JSON Schema object of ``properties`` with ``required`` names."""
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    if closed:
        schema["additionalProperties"] = False
    return schema


class _Builder:
    def __init__(
        self, localns: Mapping[str, Any] | None = None, on_typeddict: TypedDictSeen | None = None
    ) -> None:
        self._active: list[Any] = []
        self._localns = dict(localns) if localns else None
        self._on_typeddict = on_typeddict

    def build(self, annotation: Any, where: str) -> dict[str, Any]:
        inner, description = unwrap_annotated(annotation)
        schema = self._plain(inner, where)
        if description:
            schema["description"] = description
        return schema

    def _fail(self, annotation: Any, where: str, why: str = "") -> UnsupportedAnnotation:
        place = f" at {where}" if where else ""
        text = typing.cast(str, getattr(annotation, "__name__", None) or repr(annotation))
        detail = f": {why}" if why else ""
        return UnsupportedAnnotation(f"no JSON Schema for type {text}{place}{detail}")

    def _plain(self, annotation: Any, where: str) -> dict[str, Any]:
        if annotation is typing.Any:
            return {}
        if annotation is None or annotation is type(None):
            return {"type": "null"}
        if annotation in _SCALARS:
            return {"type": _SCALARS[annotation]}
        if isinstance(annotation, typing.TypeVar | typing.ParamSpec | typing.TypeVarTuple):
            raise self._fail(annotation, where, "generic type variables are not allowed")
        if isinstance(annotation, str | typing.ForwardRef):
            raise self._fail(annotation, where, "unresolved forward reference")
        origin = typing.get_origin(annotation)
        args = typing.get_args(annotation)
        if origin is typing.Literal:
            return self._literal(annotation, args, where)
        if origin is typing.Union or origin is types.UnionType:
            return self._union(args, where)
        if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
            return self._enum(annotation, where)
        if annotation in _SEQUENCES or origin in _SEQUENCES:
            item = self.build(args[0], f"{where}[]") if args else {}
            return {"type": "array", "items": item} if item else {"type": "array"}
        if annotation in _SETS or origin in _SETS:
            item = self.build(args[0], f"{where}[]") if args else {}
            schema: dict[str, Any] = {"type": "array", "uniqueItems": True}
            if item:
                schema["items"] = item
            return schema
        if annotation is tuple or origin is tuple:
            return self._tuple(args, where)
        if annotation in _MAPPINGS or origin in _MAPPINGS:
            return self._mapping(annotation, args, where)
        if _is_typeddict(annotation):
            return self._nested(annotation, where, self._typeddict)
        if isinstance(annotation, type) and attrs.has(annotation):
            return self._nested(annotation, where, self._attrs)
        if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
            return self._nested(annotation, where, self._dataclass)
        raise self._fail(annotation, where)

    def _literal(self, annotation: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        values = [arg.value if isinstance(arg, enum.Enum) else arg for arg in args]
        if not all(_json_scalar(value) for value in values):
            raise self._fail(annotation, where, "Literal values must be JSON scalars")
        schema: dict[str, Any] = {"enum": values}
        kinds = {_SCALARS.get(type(value)) for value in values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), **schema}
        return schema

    def _enum(self, annotation: type[enum.Enum], where: str) -> dict[str, Any]:
        values = [member.value for member in annotation]
        if not values or not all(_json_scalar(value) for value in values):
            raise self._fail(annotation, where, "enum values must be JSON scalars")
        schema: dict[str, Any] = {"enum": values}
        kinds = {_SCALARS.get(type(value)) for value in values}
        if len(kinds) == 1 and None not in kinds:
            schema = {"type": kinds.pop(), **schema}
        return schema

    def _union(self, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        options = [self.build(arg, where) for arg in args]
        if len(options) == 2 and {"type": "null"} in options:
            other = options[0] if options[1] == {"type": "null"} else options[1]
            if set(other) == {"type"} and isinstance(other["type"], str):
                return {"type": [other["type"], "null"]}
        return {"anyOf": options}

    def _tuple(self, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        if not args:
            return {"type": "array"}
        if len(args) == 2 and args[1] is Ellipsis:
            item = self.build(args[0], f"{where}[]")
            return {"type": "array", "items": item} if item else {"type": "array"}
        if args == ((),):  # tuple[()]
            return {"type": "array", "maxItems": 0}
        items = [self.build(arg, f"{where}[{index}]") for index, arg in enumerate(args)]
        return {
            "type": "array",
            "prefixItems": items,
            "items": False,
            "minItems": len(items),
            "maxItems": len(items),
        }

    def _mapping(self, annotation: Any, args: tuple[Any, ...], where: str) -> dict[str, Any]:
        if not args:
            return {"type": "object"}
        key, value = args
        if unwrap_annotated(key)[0] is not str:
            raise self._fail(annotation, where, "JSON object keys are strings")
        schema: dict[str, Any] = {"type": "object"}
        item = self.build(value, f"{where}{{}}")
        schema["additionalProperties"] = item if item else True
        return schema

    def _nested(self, cls: type, where: str, fields: Any) -> dict[str, Any]:
        if cls in self._active:
            raise self._fail(cls, where, "recursive types are not supported")
        self._active.append(cls)
        try:
            schema: dict[str, Any] = fields(cls, where)
        finally:
            self._active.pop()
        doc = _class_doc(cls)
        if doc:
            schema["description"] = doc
        return schema

    def _resolved_hints(self, cls: type, where: str) -> dict[str, Any]:
        try:
            if attrs.has(cls):
                # Resolve in place too, so cattrs structures the class with real types.
                attrs.resolve_types(cls, localns=self._localns, include_extras=True)
            return typing.get_type_hints(cls, localns=self._localns, include_extras=True)
        except Exception as exc:
            raise self._fail(cls, where, f"cannot resolve its annotations ({exc})") from exc

    def _attrs(self, cls: type, where: str) -> dict[str, Any]:
        hints = self._resolved_hints(cls, where)
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        for field in attrs.fields(cls):
            if not field.init:
                continue
            name = field.alias or field.name
            annotation = hints.get(field.name, field.type)
            if annotation is None:
                raise self._fail(cls, where, f"field {field.name!r} has no annotation")
            prop = self.build(annotation, f"{where}.{name}")
            if field.default is attrs.NOTHING:
                required.append(name)
            elif not isinstance(field.default, attrs.Factory):  # type: ignore[arg-type]
                ok, value = json_default(field.default)
                if ok:
                    prop["default"] = value
            properties[name] = prop
        return object_schema(properties, required)

    def _dataclass(self, cls: type, where: str) -> dict[str, Any]:
        hints = self._resolved_hints(cls, where)
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        for field in dataclasses.fields(cls):
            if not field.init:
                continue
            prop = self.build(hints[field.name], f"{where}.{field.name}")
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                required.append(field.name)
            elif field.default is not dataclasses.MISSING:
                ok, value = json_default(field.default)
                if ok:
                    prop["default"] = value
            properties[field.name] = prop
        return object_schema(properties, required)

    def _typeddict(self, cls: type, where: str) -> dict[str, Any]:
        hints = self._resolved_hints(cls, where)
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        properties: dict[str, dict[str, Any]] = {}
        required: list[str] = []
        types_of: dict[str, Any] = {}
        for name, annotation in hints.items():
            inner = annotation
            # Under postponed annotations Python 3.11 cannot see Required/NotRequired
            # when it computes __required_keys__, so read the wrappers here.
            is_required = name in required_keys
            while typing.get_origin(inner) in (typing.NotRequired, typing.Required):
                is_required = typing.get_origin(inner) is typing.Required
                inner = typing.get_args(inner)[0]
            properties[name] = self.build(inner, f"{where}.{name}")
            types_of[name] = inner
            if is_required:
                required.append(name)
        if self._on_typeddict is not None:
            self._on_typeddict(cls, types_of, frozenset(required))
        return object_schema(properties, required)


def _class_doc(cls: type) -> str | None:
    doc = cls.__doc__
    if not doc or _is_generated_doc(cls, doc):
        return None
    import inspect

    first = inspect.cleandoc(doc).split("\n\n", 1)[0]
    return " ".join(first.split()) or None


def _is_generated_doc(cls: type, doc: str) -> bool:
    # dataclasses synthesize "Name(field: type, ...)" docstrings; they help nobody.
    return dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}(")


__all__ = [
    "InvalidToolFunction",
    "UnsupportedAnnotation",
    "contains_type_var",
    "json_default",
    "object_schema",
    "schema_for",
    "unwrap_annotated",
]
