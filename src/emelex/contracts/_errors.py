"""Errors of the wire package: every bad wire value surfaces as a :class:`ContractError`."""

from __future__ import annotations

from emelex._errors import EmelexError, LimitExceeded


class ContractError(EmelexError):
    """A value does not satisfy the service contract (bad type, unknown or missing field).

    ``problems`` lists every problem found, each naming its JSON path (``$.rows[0].body``).
    """

    def __init__(self, message: str, problems: tuple[str, ...] = ()) -> None:
        self.problems = problems or (message,)
        super().__init__(message)


class ContractLimitExceeded(ContractError, LimitExceeded):
    """A bounded wire value (page size, query length, name, attachment total) is too large."""

    def __init__(self, limit: str, maximum: int, actual: int | None = None) -> None:
        LimitExceeded.__init__(self, limit, maximum, actual)
        self.problems = (str(self),)
