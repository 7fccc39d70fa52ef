"""The turn's fixed rules: default budgets, synthetic result texts and their checks."""

from __future__ import annotations

#: Default most model rounds of one turn (each round after the first follows a tool batch).
DEFAULT_MAX_ROUNDS = 16
#: Default most rounds of one turn in which the model gets corrections (any tool).
DEFAULT_MAX_RETRIES = 6

NOT_EXECUTED = "not executed: the turn ended before this call ran"
#: Most calls of a refused round kept in the conversation (the rest are left out: the
#: model only needs to see that, and why, its round was refused).
REFUSED_CALLS_KEPT = 16

INTERRUPTED = (
    "interrupted: the call started but the turn was cancelled before it returned; "
    "its effects are unknown"
)


def refused_text(reason: str, kept: int, proposed: int) -> str:
    """The synthetic result every kept call of a refused round gets."""
    text = f"refused: nothing in this round ran because {reason}."
    if kept < proposed:
        text += (
            f" Only the first {kept} of the round's {proposed:,} calls are kept in the "
            "conversation."
        )
    return text


def _name(name: str) -> str:
    return repr(name if len(name) <= 64 else name[:63] + "…")


def check_max_retries(value: int) -> None:
    """Raise ValueError unless ``value`` is a non-negative int (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_retries must be a non-negative integer, got {value!r}")


def check_max_rounds(value: int) -> None:
    """Raise ValueError unless ``value`` is a positive int (not a bool)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"max_rounds must be a positive integer, got {value!r}")
