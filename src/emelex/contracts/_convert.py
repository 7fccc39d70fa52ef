"""The one converter between wire JSON values and the declarations (cattrs).

Attributes are snake_case, wire keys camelCase. Structuring is strict: unknown or missing
keys, a string where a number belongs, or an unknown union ``kind`` are a
:class:`ContractError`; the classes check their own types and bounds when built.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar, get_args, overload

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from emelex.contracts._errors import ContractError, ContractLimitExceeded
from emelex.contracts._wire import is_union, tag_of

T = TypeVar("T")


def camel(name: str) -> str:
    """``source_sequence`` -> ``sourceSequence``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


_CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")


def is_camel(name: str) -> bool:
    """Whether ``name`` is a lower camelCase wire key."""
    return _CAMEL.match(name) is not None


def _passthrough(value: Any, _type: Any) -> Any:
    # The declarations check primitive types at construction; no silent coercion here.
    return value


def _structure_tuple(value: Any, tp: Any) -> Any:
    if not isinstance(value, list | tuple):
        raise ContractError(f"expected an array, got {type(value).__name__}")
    (item_type,) = get_args(tp)[:1]
    return tuple(_converter.structure(item, item_type) for item in value)


def _structure_dict(value: Any, _type: Any) -> Any:
    if not isinstance(value, dict):
        raise ContractError(f"expected an object, got {type(value).__name__}")
    return value


def _structure_union(value: Any, tp: Any) -> Any:
    arms = [arm for arm in get_args(tp) if arm is not type(None)]
    if value is None:
        if len(arms) < len(get_args(tp)):
            return None
        raise ContractError("null is not allowed here")
    if len(arms) == 1:
        return _converter.structure(value, arms[0])
    tags = {tag_of(arm): arm for arm in arms}
    if None in tags:
        # Unions of plain values (int | None was handled above): take the first that fits.
        return value
    if not isinstance(value, dict):
        raise ContractError(f"expected an object, got {type(value).__name__}")
    kind = value.get("kind")
    member = tags.get(kind) if isinstance(kind, str) else None
    if member is None:
        raise ContractError(f"unknown kind {kind!r}: expected one of {sorted(tags)}")  # type: ignore[type-var]
    return _converter.structure(value, member)


def _make_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
    for primitive in (str, int, bool, float):
        converter.register_structure_hook(primitive, _passthrough)
    converter.register_structure_hook(Any, _passthrough)
    converter.register_structure_hook_func(
        lambda tp: getattr(tp, "__origin__", None) is tuple, _structure_tuple
    )
    converter.register_structure_hook_func(
        lambda tp: getattr(tp, "__origin__", None) is dict, _structure_dict
    )
    converter.register_structure_hook_func(is_union, _structure_union)

    def structure_factory(cls: type) -> Any:
        renames: dict[str, Any] = {
            f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)
        }
        keys = [camel(f.name) for f in attrs.fields(cls)]
        generated: Any = make_dict_structure_fn(
            cls, converter, _cattrs_forbid_extra_keys=True, **renames
        )

        def structure(value: Any, tp: Any) -> Any:
            if not isinstance(value, dict):
                raise ContractError(f"expected a {cls.__name__} object, got {type(value).__name__}")
            missing = [key for key in keys if key not in value]
            if missing:
                # Every field is required on the wire, defaults are Python conveniences.
                unknown = sorted(str(key) for key in value if key not in keys)
                also = f"; unknown fields {unknown}" if unknown else ""
                raise ContractError(f"{cls.__name__}: required fields missing: {missing}{also}")
            return generated(value, tp)

        return structure

    def unstructure_factory(cls: type) -> Any:
        renames: dict[str, Any] = {
            f.name: override(rename=camel(f.name)) for f in attrs.fields(cls)
        }
        return make_dict_unstructure_fn(cls, converter, **renames)

    converter.register_structure_hook_factory(attrs.has, structure_factory)
    converter.register_unstructure_hook_factory(attrs.has, unstructure_factory)
    converter.register_unstructure_hook(
        tuple, lambda value: [converter.unstructure(v) for v in value]
    )
    return converter


_converter = _make_converter()


def to_wire(value: Any) -> Any:
    """The JSON value (dicts, lists, strings, numbers, booleans, null) of a declaration."""
    return _converter.unstructure(value)


@overload
def from_wire(cls: type[T], value: Any) -> T: ...
@overload
def from_wire(cls: Any, value: Any) -> Any: ...
def from_wire(cls: Any, value: Any) -> Any:
    """Build ``cls`` (a declaration or named union) from a decoded JSON value.

    Raises :class:`ContractError` (:class:`ContractLimitExceeded` for a bound) naming the
    path of every problem.
    """
    try:
        result = _converter.structure(value, cls)
    except ContractError:
        raise
    except cattrs.BaseValidationError as exc:
        problems = tuple(cattrs.transform_error(exc, path="$", format_exception=_describe))
        limit = _find(exc, ContractLimitExceeded)
        if limit is not None:
            error = ContractLimitExceeded(limit.limit, limit.maximum, limit.actual)
            error.problems = problems
            raise error from exc
        raise ContractError("; ".join(problems), problems) from exc
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ContractError(f"invalid {getattr(cls, '__name__', cls)}: {exc}") from exc
    return result


def _describe(exc: BaseException, _type: Any) -> str:
    if isinstance(exc, ContractError):
        return str(exc)
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown fields {sorted(exc.extra_fields)}"
    return f"invalid value ({type(exc).__name__}: {exc})"


def _find(exc: BaseException, kind: type[ContractLimitExceeded]) -> ContractLimitExceeded | None:
    if isinstance(exc, kind):
        return exc
    for inner in getattr(exc, "exceptions", ()):
        found = _find(inner, kind)
        if found is not None:
            return found
    return None
