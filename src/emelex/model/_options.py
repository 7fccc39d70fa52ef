"""Sampling and reasoning options for one generation."""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Literal, TypeAlias

import attrs

from emelex.model._errors import InvalidOptions


class Unset(enum.Enum):
    """The type of :data:`UNSET`, the marker for "not specified, use the default".

    It is distinct from ``None`` so that ``None`` can stay an ordinary value.
    """

    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = Unset.UNSET
"""Marks an option that was not specified (so a default or another layer decides)."""

ReasoningMode: TypeAlias = Literal["off", "auto", "budget"]

_MAX_SEED: Final = 2**63 - 1  # fits a signed 64-bit integer in every backend


@attrs.frozen(repr=False)
class Reasoning:
    """How much the model may think before answering.

    Use the constants :attr:`OFF` (no thinking), :attr:`AUTO` (the model decides) or
    :meth:`budget` (think, within ``budget_tokens`` tokens). Values compare and hash by
    ``mode`` and ``budget_tokens``. Building an inconsistent value directly raises
    :class:`InvalidOptions`.
    """

    OFF: ClassVar[Reasoning]
    AUTO: ClassVar[Reasoning]

    mode: ReasoningMode
    budget_tokens: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.mode == "budget":
            tokens = self.budget_tokens
            if type(tokens) is not int or tokens <= 0:
                raise InvalidOptions(
                    f"a reasoning budget must be a positive integer, got {tokens!r}"
                )
        elif self.mode in ("off", "auto"):
            if self.budget_tokens is not None:
                raise InvalidOptions(f"reasoning mode {self.mode!r} takes no budget_tokens")
        else:
            raise InvalidOptions(f"unknown reasoning mode {self.mode!r}")

    @classmethod
    def budget(cls, tokens: int) -> Reasoning:
        """Thinking on, limited to ``tokens`` (> 0) reasoning tokens.

        Raises :class:`InvalidOptions` when ``tokens`` is not a positive integer.
        """
        return cls("budget", tokens)

    @property
    def enabled(self) -> bool:
        """Whether this setting asks the model to think at all."""
        return self.mode != "off"

    def __repr__(self) -> str:
        if self.mode == "budget":
            return f"Reasoning.budget({self.budget_tokens})"
        return f"Reasoning.{self.mode.upper()}"


Reasoning.OFF = Reasoning("off")
Reasoning.AUTO = Reasoning("auto")


_MAX_SCHEMA_BYTES: Final = 64 * 1024  # a schema option, as JSON


def _to_schema(value: Mapping[str, Any] | None, what: str) -> dict[str, Any] | None:
    """A private JSON copy of a schema option, bounded in size."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidOptions(f"{what} must be a JSON Schema object, got {value!r}")
    try:
        encoded = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError) as exc:
        raise InvalidOptions(f"{what} is not JSON: {exc}") from exc
    if len(encoded.encode()) > _MAX_SCHEMA_BYTES:
        raise InvalidOptions(f"{what} is larger than {_MAX_SCHEMA_BYTES} bytes")
    schema: dict[str, Any] = json.loads(encoded)
    return schema


def _to_arguments_schema(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return _to_schema(value, "tool_choice arguments")


ToolChoiceMode: TypeAlias = Literal["auto", "required", "none", "tool"]


@attrs.frozen(repr=False)
class ToolChoice:
    """Whether the model may, must or must not call one of the offered tools.

    Use the constants :attr:`AUTO` (the model decides), :attr:`REQUIRED` (it must call
    one of the offered tools), :attr:`NONE` (it must answer in text) or :meth:`tool`
    (it must call that one tool). A plain string ``"auto"``, ``"required"`` or
    ``"none"`` is accepted wherever a ``ToolChoice`` is. Building an inconsistent value
    directly raises :class:`InvalidOptions`.

    A choice that forces a call applies to every model round it is given to: a turn that
    keeps a forced choice for all its rounds never ends with an answer (its round limit
    ends it). Force a call for one round at a time.
    """

    AUTO: ClassVar[ToolChoice]
    REQUIRED: ClassVar[ToolChoice]
    NONE: ClassVar[ToolChoice]

    mode: ToolChoiceMode
    name: str | None = None
    arguments: dict[str, Any] | None = attrs.field(
        default=None, kw_only=True, converter=_to_arguments_schema, hash=False
    )

    def __attrs_post_init__(self) -> None:
        if self.mode == "tool":
            if not isinstance(self.name, str) or not self.name:
                raise InvalidOptions(f"a named tool choice needs a tool name, got {self.name!r}")
        elif self.mode in ("auto", "required", "none"):
            if self.name is not None or self.arguments is not None:
                raise InvalidOptions(f"tool choice {self.mode!r} takes no tool name or arguments")
        else:
            raise InvalidOptions(f"unknown tool choice {self.mode!r}")

    @classmethod
    def tool(cls, name: str, *, arguments: Mapping[str, Any] | None = None) -> ToolChoice:
        """The model must call the tool ``name`` (which the request must offer), once.

        ``arguments``, a JSON Schema for the call's arguments, narrows them further on
        backends that constrain by grammar (the native one): e.g. one of a few paths.
        The tool's own schema still decides validity; the prompt still shows the tool as
        declared, so a narrowed round keeps the cached prompt prefix of the others.
        """
        return cls("tool", name, arguments=arguments)

    @property
    def forces_call(self) -> bool:
        """Whether the model must call a tool (``REQUIRED`` or a named tool)."""
        return self.mode in ("required", "tool")

    def __repr__(self) -> str:
        if self.mode == "tool":
            narrowed = "" if self.arguments is None else ", arguments=..."
            return f"ToolChoice.tool({self.name!r}{narrowed})"
        return f"ToolChoice.{self.mode.upper()}"


ToolChoice.AUTO = ToolChoice("auto")
ToolChoice.REQUIRED = ToolChoice("required")
ToolChoice.NONE = ToolChoice("none")


def _to_tool_choice(value: ToolChoice | str | Unset) -> ToolChoice | Unset:
    if value is UNSET or isinstance(value, ToolChoice):
        return value
    if isinstance(value, str) and value in ("auto", "required", "none"):
        return ToolChoice(value)  # type: ignore[arg-type]
    raise InvalidOptions(
        "tool_choice must be a ToolChoice, 'auto', 'required' or 'none', "
        f"got {value!r} (use ToolChoice.tool(name) to force one tool)"
    )


def _to_output_schema(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return _to_schema(value, "output_schema")


def _bounded_int(value: int | None, what: str, low: int, high: int | None) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise InvalidOptions(f"{what} must be an integer or None, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise InvalidOptions(f"{what} must be {bound}, got {value}")
    return value


def _bounded_float(value: float | None, what: str, low: float, high: float) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOptions(f"{what} must be a number or None, got {value!r}")
    number = float(value)
    # NaN fails every comparison, so check it explicitly.
    if math.isnan(number) or not low <= number <= high:
        raise InvalidOptions(f"{what} must be in [{low}, {high}], got {value!r}")
    return number


def _to_max_tokens(value: int | None) -> int | None:
    return _bounded_int(value, "max_tokens", 1, None)


def _to_seed(value: int | None) -> int | None:
    return _bounded_int(value, "seed", 0, _MAX_SEED)


def _to_temperature(value: float | None) -> float | None:
    return _bounded_float(value, "temperature", 0.0, 2.0)


def _to_top_p(value: float | None) -> float | None:
    return _bounded_float(value, "top_p", 0.0, 1.0)


def _to_stop(value: str | Sequence[str]) -> tuple[str, ...]:
    # A lone string is one stop sequence, not a sequence of one-character stops.
    items = (value,) if isinstance(value, str) else value
    if not isinstance(items, Sequence):
        raise InvalidOptions(f"stop must be a string or a sequence of strings, got {value!r}")
    stop = tuple(items)
    for item in stop:
        if not isinstance(item, str) or not item:
            raise InvalidOptions(f"stop sequences must be non-empty strings, got {item!r}")
    return stop


def _check_reasoning(_instance: Any, _attribute: Any, value: Any) -> None:
    if value is not UNSET and not isinstance(value, Reasoning):
        raise InvalidOptions(f"reasoning must be a Reasoning or UNSET, got {value!r}")


@attrs.frozen(kw_only=True)
class GenerationOptions:
    """Sampling settings for one generation; every field is optional.

    * ``max_tokens``: at most this many generated tokens (> 0);
    * ``temperature``: in [0, 2], stored as a float;
    * ``top_p``: nucleus sampling mass in [0, 1], stored as a float;
    * ``seed``: in [0, 2**63 - 1] for reproducible sampling where the backend allows;
    * ``stop``: stop sequences (non-empty strings; a single string means one sequence);
    * ``reasoning``: a :class:`Reasoning` setting, or :data:`UNSET` for the default;
    * ``tool_choice``: a :class:`ToolChoice` (or ``"auto"``, ``"required"``, ``"none"``),
      or :data:`UNSET` for the backend's default;
    * ``output_schema``: a JSON Schema (at most 64 KiB as JSON) the text answer must
      follow; the native backend constrains the answer by grammar, an OpenAI-compatible
      server gets it as a JSON-schema response format. A request that may also call
      tools must use ``ToolChoice.NONE`` with it on the native backend.

    ``None``, an empty ``stop`` and ``UNSET`` all mean "not specified". Out-of-range or
    mistyped values raise :class:`InvalidOptions`.
    """

    max_tokens: int | None = attrs.field(default=None, converter=_to_max_tokens)
    temperature: float | None = attrs.field(default=None, converter=_to_temperature)
    top_p: float | None = attrs.field(default=None, converter=_to_top_p)
    seed: int | None = attrs.field(default=None, converter=_to_seed)
    stop: tuple[str, ...] = attrs.field(default=(), converter=_to_stop)
    reasoning: Reasoning | Unset = attrs.field(default=UNSET, validator=_check_reasoning)
    tool_choice: ToolChoice | Unset = attrs.field(default=UNSET, converter=_to_tool_choice)
    output_schema: dict[str, Any] | None = attrs.field(
        default=None, converter=_to_output_schema, hash=False
    )

    def overlay(self, override: GenerationOptions) -> GenerationOptions:
        """Return these options with every field that ``override`` specifies replaced.

        A field counts as specified when it is not ``None``, not ``UNSET`` and (for
        ``stop``) not empty; so an explicit ``Reasoning.OFF`` or ``Reasoning.AUTO`` in
        ``override`` replaces a budget here, and a budget in ``override`` wins too.
        """
        return GenerationOptions(
            max_tokens=self.max_tokens if override.max_tokens is None else override.max_tokens,
            temperature=(
                self.temperature if override.temperature is None else override.temperature
            ),
            top_p=self.top_p if override.top_p is None else override.top_p,
            seed=self.seed if override.seed is None else override.seed,
            stop=override.stop or self.stop,
            reasoning=self.reasoning if override.reasoning is UNSET else override.reasoning,
            tool_choice=(
                self.tool_choice if override.tool_choice is UNSET else override.tool_choice
            ),
            output_schema=(
                self.output_schema if override.output_schema is None else override.output_schema
            ),
        )
