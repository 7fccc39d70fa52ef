"""The one check every backend applies after a generation whose tool choice forced a
call: a forced choice that yields no valid call is an error, not an empty answer."""

from __future__ import annotations

from emelex.model._errors import ToolCallMissing
from emelex.model._events import Response
from emelex.model._options import UNSET, ToolChoice
from emelex.model._request import GenerationRequest


def requested_choice(
    request: GenerationRequest, default: ToolChoice = ToolChoice.AUTO
) -> ToolChoice:
    """The tool choice a request asks for: its own, else the backend's ``default``;
    ``NONE`` when it offers no tools."""
    if not request.tools:
        return ToolChoice.NONE
    choice = request.options.tool_choice
    return default if choice is UNSET else choice


def check_forced_call(choice: ToolChoice, response: Response) -> None:
    """Raise :class:`ToolCallMissing` when ``choice`` forces a call and ``response``
    (not cancelled) has none of an allowed tool.

    A call whose arguments could not be parsed still counts (it carries
    ``arguments_error``, and the agent loop answers it with a correction); a call of
    another tool than the named one does not.
    """
    if not choice.forces_call or response.finish_reason == "cancelled":
        return
    names = tuple(call.name for call in response.tool_calls)
    if choice.name is None and names:
        return
    if choice.name is not None and choice.name in names:
        return
    wanted = "a tool call" if choice.name is None else f"a call of {choice.name!r}"
    # Counts only: names and text are model output, kept as attributes, not echoed.
    got = f"{len(names)} call(s) of other tools" if names else "no call"
    raise ToolCallMissing(
        f"the tool choice {choice!r} asked for {wanted}; the generation ended "
        f"({response.finish_reason}) with {got}",
        tool=choice.name,
        finish_reason=response.finish_reason,
        text=response.text,
        calls=names,
    )
