"""Checks of generation options against what the model's chat template proves."""

from __future__ import annotations

from emelex.agent._errors import CapabilityMissing
from emelex.model import UNSET, Capabilities, GenerationOptions


def thinking_requested(options: GenerationOptions) -> bool:
    reasoning = options.reasoning
    return reasoning is not UNSET and reasoning.mode != "off"


def check_options_capabilities(options: GenerationOptions, capabilities: Capabilities) -> None:
    """Raise CapabilityMissing when ``options`` ask for thinking the model proves it
    cannot toggle. Unknown capabilities defer."""
    if thinking_requested(options) and capabilities.thinking_toggle is False:
        raise CapabilityMissing(
            "reasoning is requested but the model's chat template has no thinking toggle"
        )
