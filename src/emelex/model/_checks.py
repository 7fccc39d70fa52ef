"""Small checks shared by the value classes of the model layer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from emelex.model._errors import ModelError

T = TypeVar("T")


def tuple_of(
    value: object, item_type: type[T], what: str, error: type[ModelError]
) -> tuple[T, ...]:
    """``value`` as a tuple whose items are all ``item_type``, else raise ``error``.

    A string is refused even though it is a sequence: it is always a caller's mistake.
    """
    # isinstance against the Sequence ABC is slow; most values are plain tuples or lists.
    if type(value) is tuple:
        items: tuple[object, ...] = value
    elif type(value) is list or (isinstance(value, Sequence) and not isinstance(value, str)):
        items = tuple(value)
    else:
        raise error(f"{what} must be a sequence of {item_type.__name__}, got {value!r}")
    # Fast path in C: requests are rebuilt every model round over the whole history.
    if set(map(type, items)) <= {item_type}:
        return items  # type: ignore[return-value]  # every item is exactly item_type
    for index, item in enumerate(items):
        if not isinstance(item, item_type):
            raise error(f"{what}[{index}] must be a {item_type.__name__}, got {item!r}")
    return items  # type: ignore[return-value]  # every item was checked above
