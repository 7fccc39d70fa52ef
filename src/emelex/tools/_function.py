"""Tools from Python functions: the ``@tool`` decorator and :class:`FunctionTool`.

``@tool`` turns an ``async def`` with typed parameters into an :class:`AgentTool`:

* the parameter annotations become a closed JSON Schema (see
  :mod:`emelex.tools._schema` for the supported types); parameters without a default
  are required;
* the docstring's first paragraph is the tool description, and its parameter section
  (Google, NumPy, reST or Epydoc style; see :mod:`emelex.tools._docstring`) describes
  the parameters; ``Annotated[T, "text"]`` describes one parameter in place (and wins
  over the docstring);
* call arguments are converted with cattrs into the annotated types (an ``Enum``
  member, an attrs instance, a tuple, ...) before the function runs. In a session the
  turn core has already validated them against the schema, once; a tool invoked on its
  own validates them itself;
* a first parameter annotated :class:`ToolCallContext` receives the call's context; it
  is not a model argument and never appears in the schema.

The return value becomes the tool output: a ``str`` is the text, a :class:`ToolOutput`
is used as is, anything else is unstructured with cattrs and JSON-encoded. Raise
:class:`ToolError` to hand the model an error result with exactly your message, or
:class:`RetryWithFeedback` to ask the model to correct its call (it counts against the
retry budgets); any other exception is reported by the harness as a failed call.

:class:`FunctionTool` is also the dynamic form for schemas known only at run time:
``FunctionTool(name, description, schema, handler)`` where ``handler(arguments)``
(or ``handler(ctx, arguments)`` after :meth:`FunctionTool.with_context`) receives the
validated arguments ``dict``.
"""

from __future__ import annotations

import inspect
import json
import sys
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, TypeVar, overload

from emelex._text import shorten
from emelex.model import ToolDefinition
from emelex.tools._context import ToolCallContext
from emelex.tools._definition import ArgumentValidator, tool_name_problem, tool_schema_problem
from emelex.tools._docstring import parse_docstring
from emelex.tools._errors import ArgumentConversionError, RetryWithFeedback, ToolError
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools._schema import InvalidToolFunction, UnsupportedAnnotation
from emelex.tools._signature import (
    Signature,
    conversion_error,
    converter,
    inspect_function,
    refuse,
)

#: Longest approval sentence; the arguments are cut to fit.
MAX_APPROVAL_REASON_CHARS: Final = 1_000
#: Longest conversion error returned to the model.
MAX_CONVERSION_ERROR_CHARS: Final = 600
#: Conversions an approval rule made, kept for the invocation that follows (per tool).
_MEMO_SIZE: Final = 32

ApprovalRule = Callable[[Any], bool]
"""Decides whether one call needs approval: receives the typed arguments object."""

F = TypeVar("F", bound=Callable[..., Any])


def check_max_retries(value: object, error: Callable[[str], Exception] = ValueError) -> int | None:
    """``value`` when it is None or a non-negative int (not a bool), else raise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise error(f"max_retries must be a non-negative integer or None, got {value!r}")
    return value


_UNSET: Any = object()


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
        "_max_retries",
        "_memo",
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
        problem = tool_name_problem(name)
        if problem is not None:
            raise InvalidToolFunction(problem)
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
        self._signature: Signature | None = None
        self._validator: ArgumentValidator | None = None
        self._max_retries: int | None = None
        self._memo: dict[int, tuple[Mapping[str, Any], Any]] = {}

    # -- copies ---------------------------------------------------------------------------
    def _copy(self, **changes: Any) -> FunctionTool:
        clone = object.__new__(FunctionTool)
        changes.setdefault("memo", {})
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

    def with_max_retries(self, n: int | None) -> FunctionTool:
        """A copy whose calls may ask the model to correct itself (invalid arguments,
        :class:`RetryWithFeedback`) in at most ``n`` rounds of one turn; ``None`` uses
        the harness default. The next correction fails the turn with
        ``RetryBudgetExhausted``."""
        return self._copy(max_retries=check_max_retries(n, InvalidToolFunction))

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
    def max_retries(self) -> int | None:
        """The per-turn retry budget of this tool (None: the harness default)."""
        return self._max_retries

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
            # Checked here, not in the constructor: a session's tool table (or
            # Agent.build) refuses a bad schema when the tool is registered.
            problem = tool_schema_problem(self._definition.parameters)
            if problem is not None:
                raise ArgumentConversionError(f"the tool's schema is invalid: {problem}")
            self._validator = ArgumentValidator(self._definition.parameters)
        problem = self._validator.problem(arguments)
        if problem is not None:
            raise ArgumentConversionError(problem)

    def _structure(self, arguments: Mapping[str, Any]) -> Any:
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
            message = shorten(conversion_error(exc), MAX_CONVERSION_ERROR_CHARS)
            raise ArgumentConversionError(f"invalid arguments: {message}") from exc

    def convert(self, arguments: Mapping[str, Any]) -> Any:
        """Validate and convert JSON ``arguments``: the typed arguments object (an
        instance of :attr:`arguments_type`) or, for a dynamic tool, a ``dict`` copy.
        Raises :class:`ArgumentConversionError`."""
        self._check(arguments)
        return self._structure(arguments)

    def _remember(self, arguments: Mapping[str, Any], converted: Any) -> None:
        # Keyed by identity and holding the mapping itself, so an id is never reused
        # while its entry lives; bounded, since a denied call never collects its entry.
        if len(self._memo) >= _MEMO_SIZE:
            del self._memo[next(iter(self._memo))]
        self._memo[id(arguments)] = (arguments, converted)

    def _recall(self, arguments: Mapping[str, Any]) -> Any:
        entry = self._memo.pop(id(arguments), None)
        if entry is not None and entry[0] is arguments:
            return entry[1]
        return _UNSET

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        """The approval sentence, or None. A rule receives the converted arguments; the
        harness has validated them, and the invocation that follows reuses the
        conversion."""
        rule = self._approval
        if rule is False:
            return None
        if not isinstance(rule, bool):
            converted = self._structure(arguments)
            self._remember(arguments, converted)
            shown = types.MappingProxyType(converted) if self._signature is None else converted
            if not rule(shown):
                return None
        rendered = json.dumps(dict(arguments), ensure_ascii=False, sort_keys=True)
        prefix = f"run the tool {self.name!r} with arguments "
        return prefix + shorten(rendered, MAX_APPROVAL_REASON_CHARS - len(prefix))

    # -- invocation -----------------------------------------------------------------------
    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        arguments = invocation.arguments
        try:
            converted = self._recall(arguments)
            if converted is _UNSET:
                if not invocation.validated:
                    self._check(arguments)
                converted = self._structure(arguments)
        except ArgumentConversionError as exc:
            return ToolOutput.feedback(f"{self.name}: {exc}")
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
        except RetryWithFeedback as exc:
            return ToolOutput.feedback(str(exc))
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
    max_retries: int | None = None,
    localns: Mapping[str, Any] | None = None,
) -> FunctionTool:
    rename = dict(rename or {})
    tool_name = name if name is not None else getattr(function, "__name__", "")
    problem = tool_name_problem(tool_name)
    if problem is not None:
        raise refuse(function, problem)
    signature, schema = inspect_function(function, rename, localns)
    if description is None:
        description = parse_docstring(inspect.getdoc(function))[0]
    made = FunctionTool(tool_name, description, schema, function)
    made._signature = signature
    made._context = signature.context
    made = made.needs_approval(needs_approval).with_max_retries(max_retries)
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
    max_retries: int | None = None,
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
    max_retries: int | None = None,
) -> FunctionTool | Callable[[Callable[..., Awaitable[Any]]], FunctionTool]:
    """Make a typed ``async def`` a tool: ``@tool`` or ``@tool(...)``.

    ``name`` / ``description`` override the function name and the docstring summary.
    ``rename`` maps parameter names to model-facing names (``{"from_": "from"}``).
    ``needs_approval=True`` asks before every call; a callable rule asks when
    ``rule(args)`` is true, where ``args`` is an instance of the generated attrs class
    :attr:`FunctionTool.arguments_type` (``run_sql`` → ``RunSqlArgs``) holding the
    converted arguments. ``interruptible=True`` selects
    ``ToolCancellationPolicy.INTERRUPTIBLE``. ``max_retries`` is the tool's retry
    budget per turn (see :meth:`FunctionTool.with_max_retries`). Raises
    :class:`InvalidToolFunction` for functions that are not ``async def``, are generic,
    take ``*args`` / ``**kwargs`` or positional-only parameters, or have missing or
    unsupported annotations.
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
            max_retries=max_retries,
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
    "RetryWithFeedback",
    "ToolCallContext",
    "ToolError",
    "UnsupportedAnnotation",
    "check_max_retries",
    "converter",
    "parse_docstring",
    "tool",
]
