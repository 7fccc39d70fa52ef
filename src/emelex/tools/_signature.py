"""Signature inspection for ``@tool``: which functions can be tools, the JSON Schema of
their parameters, and the generated attrs class their arguments convert into."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import cattrs
from cattrs.strategies import configure_union_passthrough

from emelex.tools._context import ToolCallContext
from emelex.tools._docstring import parse_docstring
from emelex.tools._schema import (
    InvalidToolFunction,
    UnsupportedAnnotation,
    contains_type_var,
    json_default,
    object_schema,
    schema_for,
    unwrap_annotated,
)

#: The converter every FunctionTool structures arguments and unstructures results with.
converter = cattrs.Converter()
configure_union_passthrough(typing.Union[str, int, float, bool, None], converter)  # noqa: UP007


def register_typeddict(cls: type, fields: dict[str, Any], required: frozenset[str]) -> None:
    """Structure ``cls`` from its resolved fields (cattrs' own TypedDict support reads
    ``__required_keys__``, which Python 3.11 gets wrong under postponed annotations)."""

    def structure(value: Any, _type: Any) -> dict[str, Any]:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected an object for {cls.__name__}, got {type(value).__name__}")
        missing = sorted(required.difference(value))
        if missing:
            raise ValueError(f"{cls.__name__} is missing {', '.join(missing)}")
        unknown = sorted(set(value).difference(fields))
        if unknown:
            raise ValueError(f"{cls.__name__} has no field {', '.join(unknown)}")
        return {key: converter.structure(item, fields[key]) for key, item in value.items()}

    # A predicate hook, not a class hook: a TypedDict class in cattrs' singledispatch
    # registry breaks the dispatch of other classes (issubclass() on a TypedDict raises),
    # so every bool and int argument after it would be "unsupported".
    converter.register_structure_hook_func(lambda candidate: candidate is cls, structure)


def conversion_error(exc: Exception) -> str:
    """A readable account of why ``converter.structure`` failed (cattrs' own paths)."""
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc, path="$"))
    return f"{type(exc).__name__}: {exc}"


@attrs.frozen
class Parameter:
    """One model argument: its Python parameter name and its model-facing name."""

    python: str
    model: str


@attrs.frozen
class Signature:
    """How a typed function is called: its parameters and the generated arguments class."""

    parameters: tuple[Parameter, ...]
    arguments_type: type
    context: bool


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def refuse(function: Callable[..., Any], why: str) -> InvalidToolFunction:
    """The error for a function that cannot become a tool."""
    name = getattr(function, "__qualname__", None) or repr(function)
    return InvalidToolFunction(f"cannot make a tool of {name}: {why}")


def inspect_function(
    function: Callable[..., Any],
    rename: Mapping[str, str],
    localns: Mapping[str, Any] | None = None,
) -> tuple[Signature, dict[str, Any]]:
    """Check ``function`` and derive its signature and its arguments' JSON Schema.
    Raises InvalidToolFunction."""
    if not callable(function):
        raise refuse(function, "it is not callable")
    if inspect.isasyncgenfunction(function):
        raise refuse(function, "async generators cannot be tools; return a value instead")
    if not inspect.iscoroutinefunction(function):
        raise refuse(function, "tool functions must be declared with async def")
    if getattr(function, "__type_params__", ()):
        raise refuse(function, "generic functions cannot be tools")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise refuse(function, f"its signature cannot be read ({exc})") from exc
    try:
        hints = typing.get_type_hints(
            function, localns=dict(localns) if localns else None, include_extras=True
        )
    except Exception as exc:
        raise refuse(function, f"its annotations cannot be resolved ({exc})") from exc
    description_of = parse_docstring(inspect.getdoc(function))[1]
    unknown = sorted(set(rename).difference(signature.parameters))
    if unknown:
        raise refuse(function, f"rename names unknown parameters: {', '.join(unknown)}")
    parameters: list[Parameter] = []
    fields: dict[str, Any] = {}
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    context = False
    for position, (name, parameter) in enumerate(signature.parameters.items()):
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise refuse(function, f"*{name} is not allowed; declare plain named parameters")
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise refuse(function, f"**{name} is not allowed; declare plain named parameters")
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise refuse(function, f"parameter {name!r} is positional-only")
        if name not in hints:
            raise refuse(function, f"parameter {name!r} has no type annotation")
        annotation = hints[name]
        if contains_type_var(annotation):
            raise refuse(function, f"parameter {name!r} is generic (uses a TypeVar)")
        if unwrap_annotated(annotation)[0] is ToolCallContext:
            if position != 0:
                raise refuse(function, "a ToolCallContext parameter must come first")
            if name in rename:
                raise refuse(function, "the ToolCallContext parameter cannot be renamed")
            context = True
            continue
        model_name = rename.get(name, name)
        if not isinstance(model_name, str) or not model_name:
            raise refuse(function, f"rename of {name!r} must be a non-empty string")
        if model_name in properties:
            raise refuse(function, f"two parameters are named {model_name!r} for the model")
        try:
            prop = schema_for(
                annotation,
                description=description_of.get(name),
                localns=localns,
                on_typeddict=register_typeddict,
            )
        except UnsupportedAnnotation as exc:
            raise UnsupportedAnnotation(
                f"cannot make a tool of {function.__qualname__}: parameter {name!r}: {exc}"
            ) from exc
        if parameter.default is inspect.Parameter.empty:
            required.append(model_name)
            fields[name] = attrs.field(type=annotation)
        else:
            ok, value = json_default(parameter.default)
            if ok:
                prop["default"] = value
            fields[name] = attrs.field(type=annotation, default=parameter.default)
        properties[model_name] = prop
        parameters.append(Parameter(name, model_name))
    arguments_type = attrs.make_class(
        _pascal(function.__name__) + "Args", fields, frozen=True, kw_only=True
    )
    arguments_type.__module__ = function.__module__
    arguments_type.__doc__ = f"The typed arguments of the {function.__name__} tool."
    return Signature(tuple(parameters), arguments_type, context), object_schema(
        properties, required
    )


__all__ = [
    "Parameter",
    "Signature",
    "conversion_error",
    "converter",
    "inspect_function",
    "refuse",
    "register_typeddict",
]
