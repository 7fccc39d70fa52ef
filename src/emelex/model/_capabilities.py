"""What a loaded model is known to preserve in its prompt format."""

from __future__ import annotations

from typing import Any

import attrs

from emelex.model._errors import InvalidRequest


def _check_tristate(
    _instance: object, attribute: attrs.Attribute[bool | None], value: object
) -> None:
    if value is not None and type(value) is not bool:
        raise InvalidRequest(f"capability {attribute.name} must be True, False or None")


def _tristate() -> Any:
    return attrs.field(default=None, validator=_check_tristate)


@attrs.frozen(kw_only=True)
class Capabilities:
    """Features a model's prompt format was checked for.

    Each field is ``True`` (proven to work), ``False`` (proven absent) or ``None``
    (unknown, e.g. for a remote or custom model that could not be probed):

    * ``system_prompt``: a system message reaches the model;
    * ``tool_declarations``: declared tools are rendered into the prompt;
    * ``tool_history``: earlier tool calls and results are rendered;
    * ``thinking_toggle``: reasoning can be switched on and off;
    * ``reasoning_history``: reasoning of earlier assistant messages is kept.
    """

    system_prompt: bool | None = _tristate()
    tool_declarations: bool | None = _tristate()
    tool_history: bool | None = _tristate()
    thinking_toggle: bool | None = _tristate()
    reasoning_history: bool | None = _tristate()

    @classmethod
    def unknown(cls) -> Capabilities:
        """Nothing proven either way (every field ``None``)."""
        return cls()

    @classmethod
    def all_proven(cls) -> Capabilities:
        """Every feature proven to work (every field ``True``)."""
        return cls(
            system_prompt=True,
            tool_declarations=True,
            tool_history=True,
            thinking_toggle=True,
            reasoning_history=True,
        )
