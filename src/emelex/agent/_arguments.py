"""What a tool call's arguments may be: JSON values, nested at most a bounded depth.

A model adapter written in Python can hand the harness anything (a ``set``, ``nan``,
an ``int`` key, a structure that contains itself). Such a call can be neither stored
nor measured nor replayed, so the turn core refuses its round before anything runs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

#: Deepest nesting of objects and arrays accepted in one call's arguments (the
#: arguments object itself is depth 1).
MAX_ARGUMENT_DEPTH: Final = 64

_SCALARS = (str, int, type(None))  # bool is an int
_EXACT_SCALARS = frozenset({str, int, bool, type(None)})


def json_problem(
    arguments: Mapping[str, Any],
    max_depth: int = MAX_ARGUMENT_DEPTH,
    max_values: int | None = None,
) -> str | None:
    """None when ``arguments`` is a JSON object of JSON values (dict with str keys,
    list, str, int, bool, finite float, None) nested at most ``max_depth`` deep, else
    a short model-readable explanation naming where a problem is.

    ``max_values`` stops the walk early: every value costs at least two bytes of JSON
    (itself and a separator), so a caller with a byte ceiling passes half of it and a
    huge structure is refused without being walked to its end."""
    if _plain(arguments, max_depth, max_values):
        return None
    # Iterative walk: a cyclic or very deep value must not exhaust the Python stack.
    stack: list[tuple[object, str, int]] = [(arguments, "", 1)]
    seen = 0
    while stack:
        value, where, depth = stack.pop()
        seen += 1
        if max_values is not None and seen > max_values:
            return f"the arguments hold more than {max_values:,} values"
        if isinstance(value, _SCALARS):
            continue
        at = where or "(root)"
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"the number at {at} is {value!r}, which JSON cannot represent"
            continue
        if isinstance(value, dict):
            if depth > max_depth:
                return f"the value at {at} is nested deeper than {max_depth} levels"
            for key, item in value.items():
                if not isinstance(key, str):
                    return (
                        f"the object at {at} has a {type(key).__name__} key {_short(key)}; "
                        "JSON object keys are strings"
                    )
                stack.append((item, f"{where}/{key[:40]}", depth + 1))
            continue
        if isinstance(value, list):
            if depth > max_depth:
                return f"the value at {at} is nested deeper than {max_depth} levels"
            stack.extend((item, f"{where}/{index}", depth + 1) for index, item in enumerate(value))
            continue
        kind = type(value).__name__
        hint = " (JSON arrays are lists)" if isinstance(value, Sequence | set | frozenset) else ""
        return f"the value at {at} is a {kind}{hint}, not a JSON value"
    return None


def _plain(arguments: object, max_depth: int, max_values: int | None) -> bool:
    """The common case, fast: True when there is nothing to report (no paths built)."""
    budget = -1 if max_values is None else max_values
    level: list[object] = [arguments]
    depth = 0
    while level:
        depth += 1
        budget -= len(level)
        if max_values is not None and budget < 0:
            return False
        below: list[object] = []
        for value in level:
            if type(value) in _EXACT_SCALARS:
                continue
            if type(value) is float:
                if not math.isfinite(value):
                    return False
            elif type(value) is dict:
                if depth > max_depth or not all(type(key) is str for key in value):
                    return False
                below.extend(value.values())
            elif type(value) is list:
                if depth > max_depth:
                    return False
                below.extend(value)
            else:
                return False  # subclasses and everything else: the careful walk decides
        level = below
    return True


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
