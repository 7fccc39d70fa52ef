"""Tools from Python functions: the ``@tool`` decorator and :class:`FunctionTool`.

``@tool`` turns an ``async def`` with typed parameters into an :class:`AgentTool`:

* the parameter annotations become a closed JSON Schema (see
  :mod:`emelex.tools._schema` for the supported types); parameters without a default
  are required;
* the docstring's first paragraph is the tool description, and a Google (``Args:``)
  or NumPy (``Parameters`` + dashes) section describes the parameters;
  ``Annotated[T, "text"]`` describes one parameter in place (and wins over the
  docstring);
* call arguments are validated against the schema and converted with cattrs into the
  annotated types (an ``Enum`` member, an attrs instance, a tuple, ...) before the
  function runs;
* a first parameter annotated :class:`ToolCallContext` receives the call's context; it
  is not a model argument and never appears in the schema.

The return value becomes the tool output: a ``str`` is the text, a :class:`ToolOutput`
is used as is, anything else is unstructured with cattrs and JSON-encoded. Raise
:class:`ToolError` to hand the model an error result with exactly your message; any
other exception is reported by the harness as a failed call.

:class:`FunctionTool` is also the dynamic form for schemas known only at run time:
``FunctionTool(name, description, schema, handler)`` where ``handler(arguments)``
(or ``handler(ctx, arguments)`` after :meth:`FunctionTool.with_context`) receives the
validated arguments ``dict``.
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar, overload

import attrs
import cattrs
import jsonschema
import jsonschema.exceptions
import jsonschema.validators
from cattrs.strategies import configure_union_passthrough

from emelex._errors import EmelexError
from emelex._text import shorten
from emelex.model import ToolDefinition
from emelex.runtime import AgentCancellation
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools._schema import (
    InvalidToolFunction,
    UnsupportedAnnotation,
    contains_type_var,
    json_default,
    object_schema,
    schema_for,
    unwrap_annotated,
)

#: Tool names the harness accepts (the same rule as the session's tool table).
TOOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}")
#: Longest approval sentence; the arguments are cut to fit.
MAX_APPROVAL_REASON_CHARS = 1_000
#: Longest conversion error returned to the model.
MAX_CONVERSION_ERROR_CHARS = 600

ApprovalRule = Callable[[Any], bool]
"""Decides whether one call needs approval: receives the typed arguments object."""

F = TypeVar("F", bound=Callable[..., Any])

#: The converter every FunctionTool structures arguments and unstructures results with.
converter = cattrs.Converter()
configure_union_passthrough(typing.Union[str, int, float, bool, None], converter)  # noqa: UP007


def _register_typeddict(cls: type, fields: dict[str, Any], required: frozenset[str]) -> None:
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


class ToolError(EmelexError):
    """Raise inside a tool function to give the model an error result with exactly
    this message (other exceptions are reported as "tool ... failed: ...")."""


class ToolCallContext:
    """What a tool function learns about the call it serves.

    Declare it as the first parameter of a ``@tool`` function (or use
    :meth:`FunctionTool.with_context`); it is injected and never appears in the schema.
    """

    __slots__ = ("_invocation",)

    def __init__(self, invocation: ToolInvocation) -> None:
        self._invocation = invocation

    @property
    def session_id(self) -> str:
        return self._invocation.session_id

    @property
    def turn_id(self) -> str:
        return self._invocation.turn_id

    @property
    def call_id(self) -> str:
        """The harness-issued id of this call (as in events, approvals and history)."""
        return self._invocation.call.id

    @property
    def tool_name(self) -> str:
        return self._invocation.call.name

    @property
    def arguments(self) -> dict[str, Any]:
        """The raw (validated, model-facing) JSON arguments of the call."""
        return self._invocation.arguments

    @property
    def approved(self) -> bool:
        """True when this exact call was approved by the session's approval policy."""
        return self._invocation.approved

    @property
    def cancellation(self) -> AgentCancellation:
        """Fires when the turn is cancelled; long-running tools should watch it."""
        return self._invocation.cancellation

    @property
    def invocation(self) -> ToolInvocation:
        return self._invocation

    async def progress(
        self, message: str, *, completed: int | None = None, total: int | None = None
    ) -> None:
        """Report progress; it reaches the session's events as ``ToolProgress``."""
        await self._invocation.progress(message, completed=completed, total=total)

    def __repr__(self) -> str:
        return (
            f"ToolCallContext(session_id={self.session_id!r}, turn_id={self.turn_id!r}, "
            f"call_id={self.call_id!r})"
        )


# -- docstrings ------------------------------------------------------------------------

_GOOGLE_PARAMS = re.compile(
    r"(?:Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments|Other Parameters)"
    r"\s*:\s*"
)
_GOOGLE_SECTION = re.compile(r"[A-Z][A-Za-z ]*:\s*")
_GOOGLE_ITEM = re.compile(
    r"\*{0,2}(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*:(?P<rest>.*)"
)
_NUMPY_RULE = re.compile(r"-{3,}\s*")
_NUMPY_PARAMS = ("Parameters", "Other Parameters", "Keyword Arguments")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _join(lines: list[str]) -> str:
    return " ".join(" ".join(lines).split())


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` from a Google or NumPy docstring.

    The description is the first paragraph, with its lines joined.
    """
    if not doc:
        return "", {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for index, line in enumerate(lines):
        if not line.strip() or _starts_section(lines, index):
            break
        summary.append(line.strip())
    params: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        stripped = line.strip()
        if _indent(line) == 0 and _GOOGLE_PARAMS.fullmatch(stripped):
            index = _google_section(lines, index + 1, params)
            continue
        if (
            _indent(line) == 0
            and stripped in _NUMPY_PARAMS
            and index + 1 < len(lines)
            and _NUMPY_RULE.fullmatch(lines[index + 1].strip())
        ):
            index = _numpy_section(lines, index + 2, params)
            continue
        index += 1
    return _join(summary), params


def _starts_section(lines: list[str], index: int) -> bool:
    stripped = lines[index].strip()
    if _indent(lines[index]) == 0 and _GOOGLE_SECTION.fullmatch(stripped):
        return True
    return index + 1 < len(lines) and bool(_NUMPY_RULE.fullmatch(lines[index + 1].strip()))


def _google_section(lines: list[str], index: int, params: dict[str, str]) -> int:
    item_indent: int | None = None
    name: str | None = None
    text: list[str] = []

    def flush() -> None:
        if name is not None and text:
            params.setdefault(name, _join(text))

    while index < len(lines):
        line = lines[index]
        if not line.strip():
            index += 1
            continue
        indent = _indent(line)
        if indent == 0:
            break
        if item_indent is None:
            item_indent = indent
        if indent <= item_indent:
            flush()
            match = _GOOGLE_ITEM.fullmatch(line.strip())
            name, text = (match["name"], [match["rest"]]) if match else (None, [])
        elif name is not None:
            text.append(line.strip())
        index += 1
    flush()
    return index


def _numpy_section(lines: list[str], index: int, params: dict[str, str]) -> int:
    names: list[str] = []
    text: list[str] = []

    def flush() -> None:
        for one in names:
            if text:
                params.setdefault(one, _join(text))

    while index < len(lines):
        line = lines[index]
        if index + 1 < len(lines) and _NUMPY_RULE.fullmatch(lines[index + 1].strip()):
            break  # the next section's header
        if not line.strip():
            index += 1
            continue
        if _indent(line) == 0:
            flush()
            head = line.split(":", 1)[0]
            names = [part.strip().lstrip("*") for part in head.split(",") if part.strip()]
            text = []
        else:
            text.append(line.strip())
        index += 1
    flush()
    return index


# -- typed signatures ------------------------------------------------------------------


@attrs.frozen
class _Parameter:
    python: str
    model: str


@attrs.frozen
class _Signature:
    """How a typed function is called: its parameters and the generated arguments class."""

    parameters: tuple[_Parameter, ...]
    arguments_type: type
    context: bool


def _pascal(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part)


def _fail(function: Callable[..., Any], why: str) -> InvalidToolFunction:
    name = getattr(function, "__qualname__", None) or repr(function)
    return InvalidToolFunction(f"cannot make a tool of {name}: {why}")


def _check_name(name: object, error: Callable[[str], Exception]) -> str:
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise error(f"tool name {name!r} must be 1-64 characters of letters, digits, _ . -")
    return name


def _inspect_function(
    function: Callable[..., Any],
    rename: Mapping[str, str],
    localns: Mapping[str, Any] | None = None,
) -> tuple[_Signature, dict[str, Any], dict[str, str]]:
    """Check ``function`` and derive its signature, its JSON Schema and the docstring's
    parameter descriptions. Raises InvalidToolFunction."""
    if not callable(function):
        raise _fail(function, "it is not callable")
    if inspect.isasyncgenfunction(function):
        raise _fail(function, "async generators cannot be tools; return a value instead")
    if not inspect.iscoroutinefunction(function):
        raise _fail(function, "tool functions must be declared with async def")
    if getattr(function, "__type_params__", ()):
        raise _fail(function, "generic functions cannot be tools")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError) as exc:
        raise _fail(function, f"its signature cannot be read ({exc})") from exc
    try:
        hints = typing.get_type_hints(
            function, localns=dict(localns) if localns else None, include_extras=True
        )
    except Exception as exc:
        raise _fail(function, f"its annotations cannot be resolved ({exc})") from exc
    description_of = parse_docstring(inspect.getdoc(function))[1]
    unknown = sorted(set(rename).difference(signature.parameters))
    if unknown:
        raise _fail(function, f"rename names unknown parameters: {', '.join(unknown)}")
    parameters: list[_Parameter] = []
    fields: dict[str, Any] = {}
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    context = False
    for position, (name, parameter) in enumerate(signature.parameters.items()):
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            raise _fail(function, f"*{name} is not allowed; declare plain named parameters")
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            raise _fail(function, f"**{name} is not allowed; declare plain named parameters")
        if parameter.kind is inspect.Parameter.POSITIONAL_ONLY:
            raise _fail(function, f"parameter {name!r} is positional-only")
        if name not in hints:
            raise _fail(function, f"parameter {name!r} has no type annotation")
        annotation = hints[name]
        if contains_type_var(annotation):
            raise _fail(function, f"parameter {name!r} is generic (uses a TypeVar)")
        if unwrap_annotated(annotation)[0] is ToolCallContext:
            if position != 0:
                raise _fail(function, "a ToolCallContext parameter must come first")
            if name in rename:
                raise _fail(function, "the ToolCallContext parameter cannot be renamed")
            context = True
            continue
        model_name = rename.get(name, name)
        if not isinstance(model_name, str) or not model_name:
            raise _fail(function, f"rename of {name!r} must be a non-empty string")
        if model_name in properties:
            raise _fail(function, f"two parameters are named {model_name!r} for the model")
        try:
            prop = schema_for(
                annotation,
                description=description_of.get(name),
                localns=localns,
                on_typeddict=_register_typeddict,
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
        parameters.append(_Parameter(name, model_name))
    arguments_type = attrs.make_class(
        _pascal(function.__name__) + "Args", fields, frozen=True, kw_only=True
    )
    arguments_type.__module__ = function.__module__
    arguments_type.__doc__ = f"The typed arguments of the {function.__name__} tool."
    return (
        _Signature(tuple(parameters), arguments_type, context),
        object_schema(properties, required),
        description_of,
    )


# -- FunctionTool ----------------------------------------------------------------------

_UNSET: Any = object()


def _bounded(text: str, limit: int) -> str:
    return shorten(text, limit)


def _conversion_error(exc: Exception) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        details = "; ".join(cattrs.transform_error(exc, path="$"))
    else:
        details = f"{type(exc).__name__}: {exc}"
    return details


class ArgumentConversionError(EmelexError, ValueError):
    """Call arguments satisfy the schema but cannot be converted to the declared types
    (or do not satisfy the schema when a tool is invoked outside a session)."""


class FunctionTool:
    """An :class:`AgentTool` backed by a Python function.

    The dynamic form: ``FunctionTool(name, description, schema, handler)``. ``handler``
    receives the validated arguments ``dict`` (a copy) and may be ``async`` or return
    an awaitable. ``schema`` is the JSON Schema of the arguments (an object). Decorate a
    typed ``async def`` with :func:`tool` for the typed form.

    Instances are immutable: :meth:`with_context`, :meth:`needs_approval`,
    :meth:`always_needs_approval` and :meth:`interruptible` return changed copies.
    """

    __slots__ = (
        "_approval",
        "_context",
        "_definition",
        "_handler",
        "_policy",
        "_signature",
        "_validator",
    )

    def __init__(
        self,
        name: str,
        description: str,
        schema: Mapping[str, Any],
        handler: Callable[..., Any],
    ) -> None:
        _check_name(name, InvalidToolFunction)
        if not isinstance(description, str):
            raise InvalidToolFunction(f"tool {name!r}: the description must be a string")
        if not isinstance(schema, Mapping):
            raise InvalidToolFunction(f"tool {name!r}: the schema must be a JSON object")
        try:
            parameters = json.loads(json.dumps(schema, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InvalidToolFunction(f"tool {name!r}: the schema is not JSON ({exc})") from exc
        if not callable(handler):
            raise InvalidToolFunction(f"tool {name!r}: the handler is not callable")
        self._definition = ToolDefinition(name, description, parameters)
        self._handler = handler
        self._context = False
        self._approval: bool | ApprovalRule = False
        self._policy = ToolCancellationPolicy.FINISH_ONCE_STARTED
        self._signature: _Signature | None = None
        self._validator: Any = None

    # -- copies ---------------------------------------------------------------------------
    def _copy(self, **changes: Any) -> FunctionTool:
        clone = object.__new__(FunctionTool)
        for slot in FunctionTool.__slots__:
            object.__setattr__(clone, slot, changes.get(slot[1:], getattr(self, slot)))
        return clone

    def with_context(self) -> FunctionTool:
        """A copy whose handler is called as ``handler(ctx, arguments)`` with a
        :class:`ToolCallContext` first (dynamic form only)."""
        if self._signature is not None:
            raise InvalidToolFunction(
                "with_context() is for dynamic tools; a typed tool gets the context by "
                "declaring a first parameter annotated ToolCallContext"
            )
        return self._copy(context=True)

    def needs_approval(self, rule: ApprovalRule | bool = True) -> FunctionTool:
        """A copy that asks for approval when ``rule(arguments)`` is true (``True``:
        on every call; ``False``: never). A typed tool's rule receives its generated
        arguments class (:attr:`arguments_type`); a dynamic tool's rule a read-only
        mapping of the arguments."""
        if not (isinstance(rule, bool) or callable(rule)):
            raise InvalidToolFunction(
                f"tool {self.name!r}: needs_approval takes a bool or a callable rule"
            )
        return self._copy(approval=rule)

    def always_needs_approval(self) -> FunctionTool:
        """A copy that asks for approval before every call."""
        return self._copy(approval=True)

    def interruptible(self, enabled: bool = True) -> FunctionTool:
        """A copy whose calls are cancelled at their next checkpoint when the turn is
        cancelled (``ToolCancellationPolicy.INTERRUPTIBLE``). Only for functions that
        leave no host work or half-done effects behind when dropped."""
        policy = (
            ToolCancellationPolicy.INTERRUPTIBLE
            if enabled
            else ToolCancellationPolicy.FINISH_ONCE_STARTED
        )
        return self._copy(policy=policy)

    # -- description ----------------------------------------------------------------------
    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def name(self) -> str:
        return self._definition.name

    @property
    def description(self) -> str:
        return self._definition.description

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON Schema of the arguments."""
        return self._definition.parameters

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self._policy

    @property
    def gated(self) -> bool:
        """True when some calls may need approval (an application must supply an
        approver)."""
        return self._approval is not False

    @property
    def approval_rule(self) -> bool | ApprovalRule:
        return self._approval

    @property
    def arguments_type(self) -> type | None:
        """The generated attrs class of a typed tool's arguments (``RunSqlArgs`` for
        ``run_sql``), or None for a dynamic tool."""
        return self._signature.arguments_type if self._signature is not None else None

    @property
    def function(self) -> Callable[..., Any]:
        """The decorated function (typed form) or the handler (dynamic form)."""
        return self._handler

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the underlying function directly (no validation, no conversion)."""
        return self._handler(*args, **kwargs)

    def __repr__(self) -> str:
        kind = "typed" if self._signature is not None else "dynamic"
        return f"<FunctionTool {self.name!r} ({kind})>"

    # -- arguments ------------------------------------------------------------------------
    def _check(self, arguments: Mapping[str, Any]) -> None:
        if self._validator is None:
            schema = self._definition.parameters
            cls = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )
            self._validator = cls(schema)
        try:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(arguments))
        except jsonschema.exceptions.SchemaError as exc:
            raise ArgumentConversionError(f"the tool's schema is invalid: {exc.message}") from exc
        if error is not None:
            where = "/".join(str(step) for step in error.absolute_path) or "(root)"
            raise ArgumentConversionError(f"invalid arguments at {where}: {error.message}")

    def convert(self, arguments: Mapping[str, Any]) -> Any:
        """Validate and convert JSON ``arguments``: the typed arguments object (an
        instance of :attr:`arguments_type`) or, for a dynamic tool, a ``dict`` copy.
        Raises :class:`ArgumentConversionError`."""
        self._check(arguments)
        signature = self._signature
        if signature is None:
            return dict(arguments)
        values = {
            parameter.python: arguments[parameter.model]
            for parameter in signature.parameters
            if parameter.model in arguments
        }
        try:
            return converter.structure(values, signature.arguments_type)
        except Exception as exc:
            message = _bounded(_conversion_error(exc), MAX_CONVERSION_ERROR_CHARS)
            raise ArgumentConversionError(f"invalid arguments: {message}") from exc

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        rule = self._approval
        if rule is False:
            return None
        if not isinstance(rule, bool):
            converted = self.convert(arguments)
            if self._signature is None:
                converted = types.MappingProxyType(converted)
            if not rule(converted):
                return None
        shown = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)
        prefix = f"run the tool {self.name!r} with arguments "
        return prefix + _bounded(shown, MAX_APPROVAL_REASON_CHARS - len(prefix))

    # -- invocation -----------------------------------------------------------------------
    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        try:
            converted = self.convert(invocation.arguments)
        except ArgumentConversionError as exc:
            return ToolOutput.error(f"{self.name}: {exc}")
        args: list[Any] = []
        if self._context:
            args.append(ToolCallContext(invocation))
        signature = self._signature
        try:
            if signature is None:
                result = self._handler(*args, converted)
            else:
                kwargs = {p.python: getattr(converted, p.python) for p in signature.parameters}
                result = self._handler(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
        except ToolError as exc:
            return ToolOutput.error(str(exc))
        return self._output(result)

    def _output(self, value: object) -> ToolOutput:
        if isinstance(value, ToolOutput):
            return value
        if isinstance(value, str):
            return ToolOutput(value)
        try:
            text = json.dumps(converter.unstructure(value), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return ToolOutput.error(
                f"tool {self.name!r} returned a {type(value).__name__} that cannot be "
                f"encoded as JSON: {exc}"
            )
        return ToolOutput(text)


def _typed_tool(
    function: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    needs_approval: bool | ApprovalRule,
    rename: Mapping[str, str] | None,
    interruptible: bool,
    localns: Mapping[str, Any] | None = None,
) -> FunctionTool:
    rename = dict(rename or {})
    tool_name = name if name is not None else getattr(function, "__name__", "")
    _check_name(tool_name, lambda why: _fail(function, why))
    signature, schema, _ = _inspect_function(function, rename, localns)
    if description is None:
        description = parse_docstring(inspect.getdoc(function))[0]
    made = FunctionTool(tool_name, description, schema, function)
    made._signature = signature
    made._context = signature.context
    made = made.needs_approval(needs_approval)
    return made.interruptible(interruptible)


@overload
def tool(function: Callable[..., Awaitable[Any]], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool | ApprovalRule = False,
    rename: Mapping[str, str] | None = None,
    interruptible: bool = False,
) -> Callable[[Callable[..., Awaitable[Any]]], FunctionTool]: ...


def tool(
    function: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    needs_approval: bool | ApprovalRule = False,
    rename: Mapping[str, str] | None = None,
    interruptible: bool = False,
) -> FunctionTool | Callable[[Callable[..., Awaitable[Any]]], FunctionTool]:
    """Make a typed ``async def`` a tool: ``@tool`` or ``@tool(...)``.

    ``name`` / ``description`` override the function name and the docstring summary.
    ``rename`` maps parameter names to model-facing names (``{"from_": "from"}``).
    ``needs_approval=True`` asks before every call; a callable rule asks when
    ``rule(args)`` is true, where ``args`` is an instance of the generated attrs class
    :attr:`FunctionTool.arguments_type` (``run_sql`` → ``RunSqlArgs``) holding the
    converted arguments. ``interruptible=True`` selects
    ``ToolCancellationPolicy.INTERRUPTIBLE``. Raises :class:`InvalidToolFunction` for
    functions that are not ``async def``, are generic, take ``*args`` / ``**kwargs`` or
    positional-only parameters, or have missing or unsupported annotations.
    """

    def decorate(
        fn: Callable[..., Awaitable[Any]], localns: Mapping[str, Any] | None = None
    ) -> FunctionTool:
        return _typed_tool(
            fn,
            name=name,
            description=description,
            needs_approval=needs_approval,
            rename=rename,
            interruptible=interruptible,
            localns=localns if localns is not None else _caller_locals(),
        )

    if function is not None:
        return decorate(function, _caller_locals())
    return decorate


def _caller_locals() -> dict[str, Any] | None:
    """The local names of the scope that applies the decorator (two frames up), so
    string annotations naming classes of a function body resolve."""
    frame = sys._getframe(2)
    if frame.f_locals is frame.f_globals:
        return None
    return dict(frame.f_locals)


__all__ = [
    "ApprovalRule",
    "ArgumentConversionError",
    "FunctionTool",
    "InvalidToolFunction",
    "ToolCallContext",
    "ToolError",
    "UnsupportedAnnotation",
    "converter",
    "parse_docstring",
    "tool",
]
