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
    names = _names(cls)
    namespace: dict[str, Any] = {}
    lines = [f"def build({', '.join(names)}):", *_construct(cls, "self", names, namespace, "")]
    return _compile(lines, namespace)


def flat_builder(
    cls: type[T], /, *, fixed: dict[str, Any] | None = None, **nested: type[Any]
) -> Callable[..., T]:
    """As :func:`positional_builder`, but each field named in ``nested`` is built, of the
    class given for it, from that class's own fields passed in its place: with
    ``flat_builder(Row, position=Position)`` a ``Row(position, turn_id)`` is built by
    ``build(source_sequence, item_index, turn_id)``. One call per value, however nested
    (a page builds hundreds). A field named in ``fixed`` always gets the value given
    there and takes no parameter."""
    fixed = fixed or {}
    names = _names(cls)
    unknown = (set(nested) | set(fixed)) - set(names)
    if unknown:
        raise TypeError(f"{cls.__name__} has no fields {sorted(unknown)}")
    namespace: dict[str, Any] = {}
    parameters: list[str] = []
    body: list[str] = []
    values: list[str] = []
    for name in names:
        if name in fixed:
            namespace[f"_fixed_{name}"] = fixed[name]
            values.append(f"_fixed_{name}")
            continue
        values.append(name)
        if name in nested:
            inner = [f"{name}_{field}" for field in _names(nested[name])]
            parameters += inner
            body += _construct(nested[name], name, inner, namespace, f"_{name}")
        else:
            parameters.append(name)
    body += _construct(cls, "self", values, namespace, "")
    return _compile([f"def build({', '.join(parameters)}):", *body], namespace)


def _names(cls: type[Any]) -> list[str]:
    if not attrs.has(cls) or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slotted attrs class")
    return [field.name for field in attrs.fields(cls)]


def _construct(
    cls: type[Any], target: str, values: list[str], namespace: dict[str, Any], key: str
) -> list[str]:
    """Lines that set ``target`` to a ``cls`` built from the expressions ``values``."""
    names = _names(cls)
    pairs = list(zip(names, values, strict=True))
    twin = _twin(cls, names)
    namespace[f"_cls{key}"] = cls
    if twin is not None:
        namespace[f"_twin{key}"] = twin
        lines = [f"    {target} = _twin{key}()"]
        lines += [f"    {target}.{name} = {value}" for name, value in pairs]
        return [*lines, f"    {target}.__class__ = _cls{key}"]
    namespace["_new"] = object.__new__
    lines = [f"    {target} = _new(_cls{key})"]
    for name, value in pairs:
        # The slot's descriptor (a base class holds those of its own fields).
        slot = next(c.__dict__[name] for c in cls.__mro__ if name in c.__dict__)
        namespace[f"_set{key}_{name}"] = slot.__set__
        lines.append(f"    _set{key}_{name}({target}, {value})")
    return lines


def _compile(lines: list[str], namespace: dict[str, Any]) -> Callable[..., Any]:
    exec("\n".join([*lines, "    return self"]), namespace)
    build: Callable[..., Any] = namespace["build"]
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
