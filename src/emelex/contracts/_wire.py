"""The ``@wire`` decorator: frozen attrs classes whose field types are checked at construction.

Each declaration states its field types once; the decorator resolves them, and the same
resolved types and field bounds drive the construction check, the converter
(``_convert``), the JSON Schema export (``_schema``) and the test strategies. Bounds live
in field metadata written by :func:`text`, :func:`count` and :func:`items`.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Callable
from typing import Any, Final, Literal, TypeVar, dataclass_transform, get_args, get_origin

import attrs

from emelex.contracts._errors import ContractError, ContractLimitExceeded

T = TypeVar("T")

#: Field metadata key holding a field's bounds (max_len, pattern, minimum, max_items ...).
BOUNDS: Final = "emelex.contracts.bounds"

#: Every wire class by name, in declaration order.
WIRE_CLASSES: dict[str, type] = {}
#: Named tagged unions: the frozenset of member classes -> the union's wire name.
UNION_NAMES: dict[frozenset[type], str] = {}
#: Every named union by name (the value is the union type itself).
WIRE_UNIONS: dict[str, Any] = {}
#: Identifier-like string types (NewType over str) -> their bounds.
WIRE_STRINGS: dict[Any, dict[str, Any]] = {}


def wire_string(new_type: Any, name: str, *, pattern: str, max_len: int, description: str) -> None:
    """Register an identifier-like string type (a NewType over ``str``) with its bounds."""
    WIRE_STRINGS[new_type] = {
        "name": name,
        "pattern": pattern,
        "max_len": max_len,
        "min_len": 1,
        "description": description,
        "limit": name,
    }


def wire_union(name: str, union: Any) -> None:
    """Name a union of wire classes, told apart on the wire by their ``kind`` field."""
    members = get_args(union)
    for member in members:
        if tag_of(member) is None:
            raise TypeError(f"{member.__name__} has no single-valued `kind` field")
    UNION_NAMES[frozenset(members)] = name
    WIRE_UNIONS[name] = union


def tag_of(cls: type) -> str | None:
    """The constant ``kind`` of a tagged union member, or None."""
    if not attrs.has(cls):
        return None
    for field in attrs.fields(cls):
        if field.name == "kind" and get_origin(field.type) is Literal:
            values = get_args(field.type)
            if len(values) == 1 and isinstance(values[0], str):
                return values[0]
    return None


def text(
    *,
    max_len: int,
    min_len: int = 0,
    pattern: str | None = None,
    limit: str | None = None,
    default: Any = attrs.NOTHING,
) -> Any:
    """A string field of at most ``max_len`` code points (``limit`` names the bound)."""
    bounds = {"max_len": max_len, "min_len": min_len, "pattern": pattern, "limit": limit}
    return attrs.field(default=default, metadata={BOUNDS: bounds})


def count(
    *,
    minimum: int = 0,
    maximum: int | None = None,
    limit: str | None = None,
    default: Any = attrs.NOTHING,
) -> Any:
    """An integer field within ``[minimum, maximum]`` (``limit`` names the bound)."""
    bounds = {"minimum": minimum, "maximum": maximum, "limit": limit}
    return attrs.field(default=default, metadata={BOUNDS: bounds})


def items(
    *,
    max_items: int,
    min_items: int = 0,
    limit: str | None = None,
    default: Any = attrs.NOTHING,
) -> Any:
    """A tuple field of at most ``max_items`` items; lists are accepted and frozen."""
    bounds = {"max_items": max_items, "min_items": min_items, "limit": limit}
    return attrs.field(default=default, converter=_freeze, metadata={BOUNDS: bounds})


def _freeze(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def field_bounds(field: attrs.Attribute[Any]) -> dict[str, Any]:
    """The bounds of ``field`` (empty when it has none)."""
    bounds: dict[str, Any] = field.metadata.get(BOUNDS, {})
    return bounds


def check_value(value: Any, field: attrs.Attribute[Any], where: str) -> None:
    """Raise :class:`ContractError` unless ``value`` fits the field's type and bounds."""
    _checker(field.type)(value, where)
    bounds = field_bounds(field)
    if bounds:
        _check_bounds(value, bounds, where)


Check = Callable[[Any, str], None]
#: One compiled check per field type: the type is taken apart once, not per value (a
#: history page decodes thousands of fields).
_CHECKERS: dict[Any, Check] = {}
#: Each wire class's fields: (attribute name, type check, bounds, "Class.field").
_PLANS: dict[type, tuple[tuple[str, Check, dict[str, Any], str], ...]] = {}


def _checker(tp: Any) -> Check:
    found = _CHECKERS.get(tp)
    if found is None:
        found = _CHECKERS[tp] = _compile(tp)
    return found


def _plan(cls: type) -> tuple[tuple[str, Check, dict[str, Any], str], ...]:
    found = _PLANS.get(cls)
    if found is None:
        found = _PLANS[cls] = tuple(
            (f.name, _checker(f.type), field_bounds(f), f"{cls.__name__}.{f.name}")
            for f in attrs.fields(cls)
        )
    return found


def _compile(tp: Any) -> Check:
    """The check of ``_check_type(value, tp, where)``, with ``tp`` taken apart now."""
    if tp is Any:
        return _accept
    if tp is str:
        return _check_str
    if tp is int:
        return _check_int
    if tp is bool:
        return _check_bool
    if tp in WIRE_STRINGS:
        bounds = WIRE_STRINGS[tp]

        def check_identifier(value: Any, where: str) -> None:
            _check_str(value, where)
            _check_bounds(value, bounds, where)

        return check_identifier
    origin = get_origin(tp)
    if origin is Literal:
        allowed = get_args(tp)

        def check_literal(value: Any, where: str) -> None:
            if not any(type(value) is type(c) and value == c for c in allowed):
                raise ContractError(f"{where}: {value!r} is not one of {list(allowed)}")

        return check_literal
    if is_union(tp):
        arms = get_args(tp)
        nullable = type(None) in arms
        checks = [_checker(arm) for arm in arms if arm is not type(None)]
        if len(checks) == 1:
            (only,) = checks

            def check_optional(value: Any, where: str) -> None:
                if value is None and nullable:
                    return
                only(value, where)

            return check_optional

        def check_union(value: Any, where: str) -> None:
            if value is None and nullable:
                return
            errors = []
            for check in checks:
                try:
                    check(value, where)
                except ContractError as exc:
                    errors.append(exc)
                else:
                    return
            if len(errors) == 1:
                raise errors[0]
            raise ContractError(f"{where}: {_kind(value)} matches none of {_name(tp)}")

        return check_union
    if origin is tuple:
        (item_type, _ellipsis) = get_args(tp)
        item_check = _checker(item_type)
        exact = item_type if isinstance(item_type, type) and attrs.has(item_type) else None

        def check_tuple(value: Any, where: str) -> None:
            if not isinstance(value, tuple):
                raise ContractError(f"{where}: expected an array, got {_kind(value)}")
            if exact is not None:
                for item in value:  # the common case: only the item's class to confirm
                    if not isinstance(item, exact):
                        break
                else:
                    return
            for index, item in enumerate(value):
                item_check(item, f"{where}[{index}]")

        return check_tuple
    if isinstance(tp, type) and attrs.has(tp):

        def check_class(value: Any, where: str) -> None:
            if not isinstance(value, tp):
                raise ContractError(f"{where}: expected {tp.__name__}, got {_kind(value)}")

        return check_class
    return lambda value, where: _check_type(value, tp, where)


def _accept(value: Any, where: str) -> None:
    return None


def _check_str(value: Any, where: str) -> None:
    if not isinstance(value, str):
        raise ContractError(f"{where}: expected a string, got {_kind(value)}")


def _check_int(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ContractError(f"{where}: expected an integer, got {_kind(value)}")


def _check_bool(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        raise ContractError(f"{where}: expected a boolean, got {_kind(value)}")


def _check_bounds(value: Any, bounds: dict[str, Any], where: str) -> None:
    limit = bounds.get("limit") or where
    if isinstance(value, str):
        if len(value) > bounds["max_len"]:
            raise ContractLimitExceeded(limit, bounds["max_len"], len(value))
        if len(value) < bounds.get("min_len", 0):
            raise ContractError(f"{where}: at least {bounds['min_len']} characters required")
        pattern = bounds.get("pattern")
        if pattern is not None and _compiled(pattern).search(value) is None:
            raise ContractError(f"{where}: {value!r} does not match {pattern}")
    elif isinstance(value, tuple):
        if len(value) > bounds["max_items"]:
            raise ContractLimitExceeded(limit, bounds["max_items"], len(value))
        if len(value) < bounds.get("min_items", 0):
            raise ContractError(f"{where}: at least {bounds['min_items']} items required")
    elif isinstance(value, int) and not isinstance(value, bool):
        maximum = bounds.get("maximum")
        if maximum is not None and value > maximum:
            raise ContractLimitExceeded(limit, maximum, value)
        if value < bounds.get("minimum", 0):
            raise ContractError(f"{where}: {value} is below the minimum {bounds['minimum']}")


_PATTERNS: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    # Patterns are the package's own constants (never user input), so `re` is safe here.
    # A final `$` also matches before a trailing newline in Python (not in ECMA 262): `\Z`.
    found = _PATTERNS.get(pattern)
    if found is None:
        anchored = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
        found = _PATTERNS[pattern] = re.compile(anchored)
    return found


def is_union(tp: Any) -> bool:
    return get_origin(tp) in (typing.Union, types.UnionType)


def _check_type(value: Any, tp: Any, where: str) -> None:
    if tp is Any:
        return
    if tp is None or tp is type(None):
        if value is not None:
            raise ContractError(f"{where}: expected null, got {_kind(value)}")
        return
    if tp in WIRE_STRINGS:
        _check_type(value, str, where)
        _check_bounds(value, WIRE_STRINGS[tp], where)
        return
    origin = get_origin(tp)
    if is_union(tp):
        arms = get_args(tp)
        if value is None and type(None) in arms:
            return
        errors = []
        for arm in arms:
            if arm is type(None):
                continue
            try:
                _check_type(value, arm, where)
            except ContractError as exc:
                errors.append(exc)
            else:
                return
        if len(errors) == 1:
            raise errors[0]
        raise ContractError(f"{where}: {_kind(value)} matches none of {_name(tp)}")
    if origin is Literal:
        if not any(type(value) is type(c) and value == c for c in get_args(tp)):
            raise ContractError(f"{where}: {value!r} is not one of {list(get_args(tp))}")
        return
    if origin is tuple:
        if not isinstance(value, tuple):
            raise ContractError(f"{where}: expected an array, got {_kind(value)}")
        (item_type, _ellipsis) = get_args(tp)
        for index, item in enumerate(value):
            _check_type(item, item_type, f"{where}[{index}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected an object, got {_kind(value)}")
        _check_json(value, where, 0)
        return
    if tp is bool:
        if not isinstance(value, bool):
            raise ContractError(f"{where}: expected a boolean, got {_kind(value)}")
        return
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ContractError(f"{where}: expected an integer, got {_kind(value)}")
        return
    if tp is str:
        if not isinstance(value, str):
            raise ContractError(f"{where}: expected a string, got {_kind(value)}")
        return
    if isinstance(tp, type) and attrs.has(tp):
        if not isinstance(value, tp):
            raise ContractError(f"{where}: expected {tp.__name__}, got {_kind(value)}")
        return
    raise TypeError(f"{where}: unsupported wire type {tp!r}")  # a declaration bug


#: Nesting depth of a free-form JSON value (tool arguments, JSON Schemas).
MAX_JSON_DEPTH: Final = 64


def _check_json(value: Any, where: str, depth: int) -> None:
    # Free-form fields must survive json.dumps: JSON types only, string keys, bounded depth.
    if depth > MAX_JSON_DEPTH:
        raise ContractLimitExceeded(f"{where} nesting depth", MAX_JSON_DEPTH, depth)
    if value is None or isinstance(value, bool | int | str):
        return
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ContractError(f"{where}: {value} is not a JSON number")
        return
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]", depth + 1)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ContractError(f"{where}: object key {key!r} is not a string")
            _check_json(item, f"{where}.{key}", depth + 1)
        return
    raise ContractError(f"{where}: {_kind(value)} is not a JSON value")


def _kind(value: Any) -> str:
    return type(value).__name__


def _name(tp: Any) -> str:
    return " | ".join(getattr(arm, "__name__", repr(arm)) for arm in get_args(tp))


@dataclass_transform(
    frozen_default=True, kw_only_default=True, field_specifiers=(attrs.field, text, count, items)
)
def wire(cls: type[T]) -> type[T]:
    """Make ``cls`` a frozen, keyword-only attrs class with checked field types."""
    return _make(cls, order=False)


@dataclass_transform(
    frozen_default=True,
    kw_only_default=True,
    order_default=True,
    field_specifiers=(attrs.field, text, count, items),
)
def ordered_wire(cls: type[T]) -> type[T]:
    """Like :func:`wire`, and instances order by their fields (positions, cursors)."""
    return _make(cls, order=True)


def trusted(cls: type[T], **values: Any) -> T:
    """An instance of the wire class ``cls`` built **without** the construction checks.

    Only for values the caller derived from data it already checked (the Host building
    history rows from its own store, say): the checks cost more than the rest of a read.
    Never for input from a client or a peer; use the constructor or ``from_wire``.
    """
    instance = object.__new__(cls)
    for name, value in values.items():
        object.__setattr__(instance, name, value)
    return instance


def _make(cls: type[T], *, order: bool) -> type[T]:
    own_check = cls.__dict__.get("__attrs_post_init__")

    def __attrs_post_init__(self: Any) -> None:
        for name, check, bounds, where in _PLANS.get(type(self)) or _plan(type(self)):
            value = getattr(self, name)
            check(value, where)
            if bounds:
                _check_bounds(value, bounds, where)
        if own_check is not None:
            own_check(self)

    cls.__attrs_post_init__ = __attrs_post_init__  # type: ignore[attr-defined]
    # No weakref slot: instances are then built through a plain twin (emelex._builders),
    # which halves the cost of the history rows and hits the Host builds from its store.
    made = attrs.frozen(kw_only=True, order=order, weakref_slot=False)(cls)
    attrs.resolve_types(made)  # type: ignore[type-var]
    WIRE_CLASSES[made.__name__] = made
    return made
