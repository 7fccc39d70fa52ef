"""Errors of emelex.testing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from emelex._errors import EmelexError
from emelex.model import ModelError

if TYPE_CHECKING:
    from emelex.testing._contract import ContractReport


class ToolContractError(EmelexError, AssertionError):
    """check_tool_contract failed; ``report`` holds every run so far."""

    def __init__(self, message: str, report: ContractReport) -> None:
        super().__init__(message)
        self.report = report


class ContractOptionsError(EmelexError, ValueError):
    """check_tool_contract was given options it cannot run with."""


class ToolContractViolation(ToolContractError):
    """The tool broke the contract: it ignored cancellation, left a thread, child process
    or Trio task running, or its call's history was inconsistent."""


class ToolAlwaysFails(ToolContractError):
    """The tool failed on every run that finished (pass ``allow_failures=True`` when that
    is what it is meant to do)."""


class InvalidScript(ModelError):
    """A :class:`ScriptedModel` script is malformed (raised when the model is built)."""


class ScriptExhausted(ModelError):
    """A :class:`ScriptedModel` was called more often than it has rounds."""


class ToolBehaviourError(EmelexError, RuntimeError):
    """Raised by a :class:`ScriptedTool` configured to fail."""


__all__ = [
    "ToolBehaviourError",
    "InvalidScript",
    "ScriptExhausted",
    "ContractOptionsError",
    "ToolContractError",
    "ToolContractViolation",
    "ToolAlwaysFails",
]
