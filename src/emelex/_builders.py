"""Fast positional constructors for frozen, slotted attrs classes. Imports nothing from
emelex: every layer may use it.

A history page builds hundreds of small values from data its builder already checked.
attrs' generated ``__init__`` of a frozen class sets each field through
``object.__setattr__``; setting the slots through their descriptors costs about a third
of that, which matters when the construction costs more than the database read.

A class declared with ``weakref_slot=False`` (its slots are exactly its fields) goes
faster still: the builder fills an instance of a plain *twin* class with the same slots
(plain attribute stores, no descriptor calls), then gives it the real class through
``__class__`` assignment, which CPython allows only when the two layouts are the same (it
checks, and the builder tries it once when it is made). A page row of three such values
is built in about 60% of the descriptor route's time.
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
    twin = _twin(cls, names)
    namespace: dict[str, Any] = {"_cls": cls}
    lines = [f"def build({', '.join(names)}):"]
    if twin is not None:
        namespace["_twin"] = twin
        lines.append("    self = _twin()")
        lines += [f"    self.{name} = {name}" for name in names]
        lines.append("    self.__class__ = _cls")
    else:
        namespace["_new"] = object.__new__
        lines.append("    self = _new(_cls)")
        for name in names:
            # The slot's descriptor (a base class holds those of its own fields).
            slot = next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)
            namespace[f"_set_{name}"] = slot.__set__
            lines.append(f"    _set_{name}(self, {name})")
    lines.append("    return self")
    exec("\n".join(lines), namespace)
    build: Callable[..., T] = namespace["build"]
    return build


def _twin(cls: type[Any], names: list[str]) -> type[Any] | None:
    """A plain class whose instances may become ``cls`` instances, or None."""
    slots = cls.__dict__["__slots__"]
    if cls.__bases__ != (object,) or sorted(slots) != sorted(names):
        return None  # inherited slots, a __weakref__ or other extra slots: other layouts
    twin = type(f"_{cls.__name__}Twin", (), {"__slots__": tuple(slots), "__module__": __name__})
    probe = twin()
    markers = [object() for _ in names]
    for name, marker in zip(names, markers, strict=True):
        setattr(probe, name, marker)
    try:
        probe.__class__ = cls
    except TypeError:
        return None  # CPython found the layouts differ
    if any(getattr(probe, name) is not marker for name, marker in zip(names, markers, strict=True)):
        return None
    return twin
