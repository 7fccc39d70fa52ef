"""The stable, versioned JSON form of every model-layer value.

One private cattrs converter knows every type; its hooks are generated once, at import,
so encoding and decoding do no per-call reflection. The rules of the format:

* attrs classes become JSON objects keyed by field name, in field order;
* optional fields are omitted while they hold "nothing" (``None``, ``UNSET`` or an
  empty tuple); every other field is always written;
* ``bytes`` become standard base64 text (with padding);
* tuples become arrays;
* content parts and stream events carry a ``"type"`` tag (``"text"``, ``"image"``,
  ``"audio"``, ``"video"``; ``"text_delta"``, ``"reasoning_delta"``, ``"progress"``,
  ``"completed"``), so unions decode without guessing;
* :func:`to_json` wraps the value in an envelope
  ``{"version": WIRE_VERSION, "type": "<class name>", "data": {...}}``.

Decoding is strict: unknown keys, wrong JSON types (``"1"`` for an integer, ``true``
for a number), invalid values and unknown versions are refused with
:class:`~emelex.SerializationError`. Changing this format means bumping
:data:`WIRE_VERSION`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, get_args, get_origin, overload

import attrs
import cattrs
from cattrs.errors import (
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.v import format_exception, transform_error

from emelex._errors import EmelexError, SerializationError
from emelex.model._capabilities import Capabilities
from emelex.model._events import (
    Completed,
    GenerationEvent,
    Progress,
    ReasoningDelta,
    Response,
    TextDelta,
    Usage,
)
from emelex.model._messages import (
    AudioPart,
    ImagePart,
    Message,
    Part,
    TextPart,
    ToolCall,
    VideoPart,
)
from emelex.model._options import UNSET, GenerationOptions, Reasoning, ToolChoice, Unset
from emelex.model._request import GenerationRequest, ToolDefinition

T = TypeVar("T")

WIRE_VERSION: Final = 1
"""Version of the JSON form written by :func:`to_json`; the only one it reads."""

_converter: Final = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)

# --- strict scalars ---------------------------------------------------------------
# cattrs' defaults coerce (str(5) == "5", int("7") == 7); a wire format must not.


def _structure_str(value: object, _: object) -> str:
    if type(value) is not str:
        raise TypeError(f"expected a string, got {type(value).__name__}")
    return value


def _structure_int(value: object, _: object) -> int:
    if type(value) is not int:
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _structure_float(value: object, _: object) -> float:
    if type(value) is float:
        return value
    if type(value) is int:
        return float(value)
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _structure_bool(value: object, _: object) -> bool:
    if type(value) is not bool:
        raise TypeError(f"expected a boolean, got {type(value).__name__}")
    return value


def _unstructure_bytes(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _structure_bytes(value: object, _: object) -> bytes:
    if type(value) is not str:
        raise TypeError(f"expected base64 text, got {type(value).__name__}")
    return base64.b64decode(value, validate=True)


def _structure_json_object(value: object, _: object) -> dict[str, Any]:
    # Tool arguments and JSON Schemas are free-form JSON objects: check the top level
    # only; the JSON parser already guarantees the rest is plain JSON data.
    if type(value) is not dict:
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    for key in value:
        if type(key) is not str:
            raise TypeError(f"expected string keys, got {key!r}")
    return value


def _identity(value: T) -> T:
    return value


_converter.register_structure_hook(str, _structure_str)
_converter.register_structure_hook(int, _structure_int)
_converter.register_structure_hook(float, _structure_float)
_converter.register_structure_hook(bool, _structure_bool)
_converter.register_structure_hook(bytes, _structure_bytes)
_converter.register_unstructure_hook(bytes, _unstructure_bytes)
_JSON_OBJECT: Final = dict[str, Any]


def _is_json_object(type_: Any) -> bool:
    return bool(type_ == _JSON_OBJECT)


_converter.register_structure_hook_func(_is_json_object, _structure_json_object)
_converter.register_unstructure_hook_func(_is_json_object, _identity)

# --- homogeneous tuples <-> arrays ----------------------------------------------------


def _is_homogeneous_tuple(type_: Any) -> bool:
    args = get_args(type_)
    return get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_structure_factory(type_: Any) -> Callable[[object, object], tuple[Any, ...]]:
    item_type = get_args(type_)[0]
    item_hook = _converter.get_structure_hook(item_type)

    def structure(value: object, _: object) -> tuple[Any, ...]:
        if type(value) is not list:
            raise TypeError(f"expected an array, got {type(value).__name__}")
        try:
            return tuple([item_hook(item, item_type) for item in value])
        except Exception:
            _raise_with_indices(value, item_hook, item_type, type_)
            raise

    return structure


def _raise_with_indices(
    value: list[Any], item_hook: Callable[[Any, Any], Any], item_type: Any, type_: Any
) -> None:
    # Slow path, taken only on failure: redo the items one by one so the error names
    # every failing index (cattrs.transform_error turns the notes into paths).
    errors: list[Exception] = []
    for index, item in enumerate(value):
        try:
            item_hook(item, item_type)
        except Exception as exc:
            exc.add_note(IterableValidationNote(f"structuring item {index}", index, item_type))
            errors.append(exc)
    if errors:
        raise IterableValidationError(f"while structuring {type_!r}", errors, type_)


def _tuple_unstructure_factory(type_: Any) -> Callable[[tuple[Any, ...]], list[Any]]:
    item_hook = _converter.get_unstructure_hook(get_args(type_)[0])

    def unstructure(value: tuple[Any, ...]) -> list[Any]:
        return [item_hook(item) for item in value]

    return unstructure


_converter.register_structure_hook_factory(_is_homogeneous_tuple, _tuple_structure_factory)
_converter.register_unstructure_hook_factory(_is_homogeneous_tuple, _tuple_unstructure_factory)

# --- attrs classes ----------------------------------------------------------------------


def _omissions(cls: type) -> dict[str, Any]:
    """Overrides that omit each field whose default means "nothing"."""
    overrides = {}
    for field in attrs.fields(cls):
        default = field.default
        # A field may ask to be left out at its default (Usage.estimated), so values
        # written before it existed stay byte-identical.
        if (
            default is None
            or default is UNSET
            or default == ()
            or field.metadata.get("omit_if_default")
        ):
            overrides[field.name] = override(omit_if_default=True)
    return overrides


# Envelope type name -> class, and back.
_CLASSES: Final[dict[str, type]] = {}
_NAMES: Final[dict[type, str]] = {}
_UNSTRUCTURE: Final[dict[type, Callable[[Any], dict[str, Any]]]] = {}


def _register(cls: type, tag: str | None = None) -> None:
    """Generate and register the hooks of one attrs class (tagged when ``tag`` is set)."""
    attrs.resolve_types(cls)
    plain_unstructure: Callable[[Any], dict[str, Any]] = make_dict_unstructure_fn(
        cls, _converter, **_omissions(cls)
    )
    unstructure: Callable[[Any], dict[str, Any]]
    structure: Callable[[Any, Any], Any]
    if tag is None:
        plain_structure: Callable[[Any, Any], Any] = make_dict_structure_fn(cls, _converter)
        unstructure = plain_unstructure

        def structure(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected a JSON object for {cls.__name__}")
            return plain_structure(value, cls)

    else:
        # The tag is not a field: let the generated function ignore unknown keys and
        # check them here, which is cheaper than copying the dict without "type".
        tagged_structure: Callable[[Any, Any], Any] = make_dict_structure_fn(
            cls, _converter, _cattrs_forbid_extra_keys=False
        )
        allowed = frozenset(field.name for field in attrs.fields(cls)) | {"type"}

        def unstructure(value: Any) -> dict[str, Any]:
            return {"type": tag, **plain_unstructure(value)}

        def structure(value: Any, _: Any) -> Any:
            if type(value) is not dict:
                raise TypeError(f"expected a JSON object for {cls.__name__}")
            if value.get("type") != tag:
                raise ValueError(f"expected type tag {tag!r}, got {value.get('type')!r}")
            if not value.keys() <= allowed:
                raise ForbiddenExtraKeysError("", cls, set(value.keys() - allowed))
            return tagged_structure(value, cls)

    _converter.register_unstructure_hook(cls, unstructure)
    _converter.register_structure_hook(cls, structure)
    _CLASSES[cls.__name__] = cls
    _NAMES[cls] = cls.__name__
    _UNSTRUCTURE[cls] = unstructure


def _register_tagged_union(union: Any, members: Mapping[str, type]) -> None:
    hooks = {tag: _converter.get_structure_hook(cls) for tag, cls in members.items()}
    classes = dict(members)
    unstructure_hooks = {cls: _UNSTRUCTURE[cls] for cls in members.values()}

    def structure(value: Any, _: Any) -> Any:
        if type(value) is not dict:
            raise TypeError(f"expected a JSON object, got {type(value).__name__}")
        tag = value.get("type")
        if type(tag) is not str or tag not in hooks:
            raise ValueError(f"unknown type tag {tag!r}; expected one of {sorted(hooks)}")
        return hooks[tag](value, classes[tag])

    def unstructure(value: Any) -> dict[str, Any]:
        return unstructure_hooks[type(value)](value)

    _converter.register_structure_hook(union, structure)
    _converter.register_unstructure_hook(union, unstructure)


_PART_TAGS: Final[dict[str, type]] = {
    "text": TextPart,
    "image": ImagePart,
    "audio": AudioPart,
    "video": VideoPart,
}
_EVENT_TAGS: Final[dict[str, type]] = {
    "text_delta": TextDelta,
    "reasoning_delta": ReasoningDelta,
    "progress": Progress,
    "completed": Completed,
}

for _tag, _cls in _PART_TAGS.items():
    _register(_cls, _tag)
_register_tagged_union(Part, _PART_TAGS)
_register(ToolCall)
_register(Message)
_register(Reasoning)


def _structure_reasoning_option(value: object, _: object) -> Reasoning:
    # UNSET is never written (the field is omitted), so a present value is a Reasoning.
    return _converter.structure(value, Reasoning)


_converter.register_structure_hook(Reasoning | Unset, _structure_reasoning_option)
_converter.register_unstructure_hook(Reasoning | Unset, _converter.get_unstructure_hook(Reasoning))
_register(ToolChoice)


def _structure_tool_choice_option(value: object, _: object) -> ToolChoice:
    # Like reasoning: UNSET is omitted on the wire, so a present value is a ToolChoice.
    return _converter.structure(value, ToolChoice)


_converter.register_structure_hook(ToolChoice | Unset, _structure_tool_choice_option)
_converter.register_unstructure_hook(
    ToolChoice | Unset, _converter.get_unstructure_hook(ToolChoice)
)
_register(GenerationOptions)
_register(ToolDefinition)
_register(GenerationRequest)
_register(Usage)
_register(Response)
_register(Capabilities)
# Completed holds a Response, so Response is registered first.
for _tag, _cls in _EVENT_TAGS.items():
    _register(_cls, _tag)
_register_tagged_union(GenerationEvent, _EVENT_TAGS)

# What from_json accepts for each target: a class, or a union alias of classes.
_ACCEPTED: Final[dict[Any, Mapping[str, type]]] = {
    cls: {name: cls} for name, cls in _CLASSES.items()
}
_ACCEPTED[Part] = {cls.__name__: cls for cls in _PART_TAGS.values()}
_ACCEPTED[GenerationEvent] = {cls.__name__: cls for cls in _EVENT_TAGS.values()}

_ENVELOPE_KEYS: Final = frozenset({"version", "type", "data"})

# --- public functions -------------------------------------------------------------------


def _format_leaf(exc: BaseException, type_: Any) -> str:
    # Our hooks and validators write precise messages; keep them instead of cattrs'
    # generic "invalid value for type".
    if isinstance(exc, TypeError | ValueError | EmelexError) and str(exc):
        return str(exc)
    return format_exception(exc, type_)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(transform_error(exc, format_exception=_format_leaf))
    return f"{type(exc).__name__}: {exc}"


def unstructure(value: Any, cls: Any = None) -> Any:
    """Turn a model-layer value into plain JSON-compatible data (dicts, lists, scalars).

    ``cls`` selects the declared type, e.g. ``tuple[Message, ...]`` for a history;
    by default the value's own type is used. Free-form JSON objects (tool arguments,
    schemas) are shared, not copied. Raises :class:`~emelex.SerializationError` when
    the value cannot be represented.
    """
    try:
        return _converter.unstructure(value, cls)
    except Exception as exc:
        raise SerializationError(f"cannot unstructure {value!r}: {_describe(exc)}") from exc


@overload
def structure(data: Any, cls: type[T]) -> T: ...
@overload
def structure(data: Any, cls: Any) -> Any: ...
def structure(data: Any, cls: Any) -> Any:
    """Build a value of type ``cls`` from plain data made by :func:`unstructure`.

    ``cls`` may be a model class, a union alias such as ``Part`` or ``GenerationEvent``,
    or a tuple type such as ``tuple[Message, ...]``. Raises
    :class:`~emelex.SerializationError` (chained to the cause) on malformed data.
    """
    try:
        return _converter.structure(data, cls)
    except Exception as exc:
        name = getattr(cls, "__name__", repr(cls))
        raise SerializationError(f"cannot structure {name}: {_describe(exc)}") from exc


def to_json(value: Any) -> str:
    """Encode a model-layer value as compact JSON inside a versioned envelope.

    Example: ``{"version":1,"type":"TextPart","data":{"type":"text","text":"hi"}}``.
    Raises :class:`~emelex.SerializationError` when ``value`` is not a model-layer value
    or holds something JSON cannot represent (a NaN, a set in tool arguments, ...).
    """
    cls = type(value)
    name = _NAMES.get(cls)
    if name is None:
        raise SerializationError(f"{cls.__name__} has no emelex wire form")
    try:
        envelope = {"version": WIRE_VERSION, "type": name, "data": _UNSTRUCTURE[cls](value)}
        return json.dumps(envelope, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"cannot encode {name}: {_describe(exc)}") from exc


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


@overload
def from_json(text: str | bytes, cls: type[T]) -> T: ...
@overload
def from_json(text: str | bytes, cls: Any) -> Any: ...
def from_json(text: str | bytes, cls: Any) -> Any:
    """Decode JSON written by :func:`to_json` into a value of type ``cls``.

    ``cls`` is a model class or one of the union aliases ``Part`` and
    ``GenerationEvent`` (then any member's envelope is accepted). Raises
    :class:`~emelex.SerializationError`, chained to the cause, when the text is not JSON,
    the envelope is malformed, the version is not :data:`WIRE_VERSION`, the type is not
    ``cls``, or the data is invalid.
    """
    accepted = _ACCEPTED.get(cls)
    if accepted is None:
        raise SerializationError(f"{cls!r} has no emelex wire form")
    try:
        envelope = json.loads(text, parse_constant=_reject_constant)
    except (TypeError, ValueError, RecursionError) as exc:
        raise SerializationError(f"not valid JSON: {exc}") from exc
    if type(envelope) is not dict or envelope.keys() != _ENVELOPE_KEYS:
        raise SerializationError(
            "expected an envelope object with exactly the keys version, type and data"
        )
    version = envelope["version"]
    if type(version) is not int or version != WIRE_VERSION:
        raise SerializationError(
            f"unsupported wire version {version!r}; this emelex reads version {WIRE_VERSION}"
        )
    name = envelope["type"]
    target = accepted.get(name) if type(name) is str else None
    if target is None:
        raise SerializationError(f"expected a {' or '.join(accepted)} envelope, got type {name!r}")
    try:
        return _converter.structure(envelope["data"], target)
    except Exception as exc:
        raise SerializationError(f"cannot decode {name}: {_describe(exc)}") from exc
