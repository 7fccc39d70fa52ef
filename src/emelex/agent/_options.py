"""Checks of generation options against what the model's chat template proves."""

from __future__ import annotations

from emelex.agent._errors import CapabilityMissing
from emelex.model import UNSET, Capabilities, GenerationOptions


def thinking_requested(options: GenerationOptions) -> bool:
    reasoning = options.reasoning
    return reasoning is not UNSET and reasoning.mode != "off"


def check_options_capabilities(options: GenerationOptions, capabilities: Capabilities) -> None:
    """Raise CapabilityMissing when ``options`` ask for thinking and the model's thinking
    toggle is not proven: thinking-on sessions need a proven toggle (an unknown one, as
    for a remote model with default capabilities, does not defer)."""
    if not thinking_requested(options):
        return
    if capabilities.thinking_toggle is False:
        raise CapabilityMissing(
            "reasoning is requested but the model's chat template has no thinking toggle"
        )
    if capabilities.thinking_toggle is None:
        raise CapabilityMissing(
            "reasoning is requested but the model's thinking toggle is not proven (unknown "
            "for this model); declare Capabilities(thinking_toggle=True) if it has one"
        )
