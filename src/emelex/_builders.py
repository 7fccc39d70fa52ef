"""Fast positional constructors for frozen, slotted attrs classes. Imports nothing from
emelex: every layer may use it.

A history page builds hundreds of small values from data its builder already checked.
attrs' generated ``__init__`` of a frozen class sets each field through
``object.__setattr__``; setting the slots through their descriptors costs about a third
of that, which matters when the construction costs more than the database read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs

T = TypeVar("T")


def positional_builder(cls: type[T]) -> Callable[..., T]:
    """A function taking the fields of ``cls`` in declaration order and returning an
    instance, **without** validators, converters or ``__attrs_post_init__``: only for
    values the caller derived from data it has already checked.

    Generated like attrs' own ``__init__``. Raises ``TypeError`` for a class that is not
    a slotted attrs class.
    """
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted attrs class")
    names = [field.name for field in attrs.fields(cls)]
    namespace: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    lines = [f"def build({', '.join(names)}):", "    self = _new(_cls)"]
    for name in names:
        namespace[f"_set_{name}"] = cls.__dict__[name].__set__  # the slot's descriptor
        lines.append(f"    _set_{name}(self, {name})")
    lines.append("    return self")
    exec("\n".join(lines), namespace)
    build: Callable[..., T] = namespace["build"]
    return build
