"""Hypothesis strategies for every wire declaration of :mod:`emelex.contracts`.

Derived from the same resolved field types and bounds the classes check, so each new
declaration gets a strategy for free::

    from emelex.contracts import SearchHit
    from emelex.testing.contract_strategies import wire_values

    @given(wire_values(SearchHit))
    def test_my_client_renders(hit): ...

Values are valid (they pass the construction checks) and small. Needs ``hypothesis``.
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar, get_args, get_origin

import attrs
from hypothesis import reject
from hypothesis import strategies as st

from emelex.contracts import (
    MAX_SAFE_INTEGER,
    WIRE_CLASSES,
    WIRE_STRINGS,
    WIRE_UNIONS,
    ContractError,
    field_bounds,
    is_union,
)
from emelex.testing.strategies import json_objects

__all__ = ["wire_values"]

T = TypeVar("T")

# Hypothesis cannot generate from every pattern (lookaheads): these are drawn by example.
_FILE_NAMES = st.text(
    st.characters(exclude_categories=("Cc", "Cs"), exclude_characters="/\\"),
    min_size=1,
    max_size=12,
).filter(lambda name: name not in (".", ".."))


def wire_values(tp: Any) -> st.SearchStrategy[Any]:
    """Valid values of a declaration class, a named union (class or name) or a field type."""
    if isinstance(tp, str):
        tp = WIRE_CLASSES.get(tp) or WIRE_UNIONS[tp]
    return _for_type(tp, {})


def _for_type(tp: Any, bounds: dict[str, Any]) -> st.SearchStrategy[Any]:
    if tp is Any:
        return json_objects()
    if tp is type(None):
        return st.none()
    if tp in WIRE_STRINGS:
        return _strings(WIRE_STRINGS[tp])
    if is_union(tp):
        return st.one_of(*(_for_type(arm, bounds) for arm in get_args(tp)))
    origin = get_origin(tp)
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if origin is tuple:
        high = min(bounds.get("max_items", 3), 3)
        low = bounds.get("min_items", 0)
        return st.lists(_for_type(get_args(tp)[0], {}), min_size=low, max_size=max(low, high)).map(
            tuple
        )
    if origin is dict:
        return json_objects()
    if tp is bool:
        return st.booleans()
    if tp is int:
        maximum = bounds.get("maximum")
        return st.integers(
            min_value=bounds.get("minimum", 0),
            max_value=MAX_SAFE_INTEGER if maximum is None else maximum,
        )
    if tp is str:
        return _strings(bounds)
    if isinstance(tp, type) and attrs.has(tp):
        return _instances(tp)
    raise TypeError(f"no strategy for {tp!r}")


def _strings(bounds: dict[str, Any]) -> st.SearchStrategy[str]:
    low = bounds.get("min_len", 0)
    high = max(low, min(bounds.get("max_len", 20), 20))
    pattern = bounds.get("pattern")
    if pattern is None:
        return st.text(min_size=low, max_size=high)
    if "(?!" in pattern:
        base: st.SearchStrategy[str] = _FILE_NAMES
    else:
        base = st.from_regex(pattern, fullmatch=True)
    compiled = re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern)
    return base.filter(
        lambda text: low <= len(text) <= bounds["max_len"] and compiled.search(text) is not None
    )


def _instances(cls: type[T]) -> st.SearchStrategy[T]:
    declared: Any = cls
    fields = {f.name: _for_type(f.type, field_bounds(f)) for f in attrs.fields(declared)}

    @st.composite
    def build(draw: st.DrawFn) -> T:
        values = {name: draw(strategy) for name, strategy in fields.items()}
        try:
            return cls(**values)
        except ContractError:
            # A cross-field rule (a hit's end before its start, an attachment total).
            reject()

    return build()
