"""Encoding the Host's own values for the wire: the JSON values ``to_wire`` gives, built
by one generated function per class.

``to_wire`` goes through cattrs, which dispatches on each field's declared type at every
call; a watch catching up thousands of rows spent most of the Host's encoding there. The
values the Host sends were built from checked data, so nothing needs checking here:
each class gets a function that writes its camelCase keys and reads its attributes
straight (plain values as they are, nested declarations, arrays and objects through a
dispatch on the runtime type). Anything outside the declarations' types goes through
``to_wire`` itself. The result never shares a container with the value.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Literal, get_args, get_origin

import attrs

from emelex.contracts._convert import camel, to_wire
from emelex.contracts._wire import WIRE_STRINGS

_ENCODERS: dict[type, Callable[[Any], Any]] = {}
_PLAIN = (str, int, bool, float, type(None))


def encode_trusted(value: Any) -> Any:
    """The JSON value of ``value`` (a declaration, or a JSON-like value holding them):
    equal to ``to_wire(value)``, several times cheaper."""
    kind = type(value)
    if kind is str or kind is int or kind is bool or kind is float or value is None:
        return value
    encode = _ENCODERS.get(kind)
    if encode is not None:
        return encode(value)
    if kind is tuple or kind is list:
        return [encode_trusted(item) for item in value]
    if kind is dict:
        return {key: encode_trusted(item) for key, item in value.items()}
    if attrs.has(kind):
        encode = _ENCODERS[kind] = _generate(kind)
        return encode(value)
    return to_wire(value)


def _plain(tp: Any) -> bool:
    """Whether every value of ``tp`` is a JSON value as it is (a string, number,
    boolean or null, or a literal of them)."""
    if tp in _PLAIN or tp in WIRE_STRINGS:
        return True
    origin = get_origin(tp)
    if origin is Literal:
        return all(type(value) in _PLAIN for value in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return all(_plain(arm) for arm in get_args(tp))
    return False


def _generate(cls: type) -> Callable[[Any], Any]:
    attrs.resolve_types(cls)
    namespace: dict[str, Any] = {"encode": encode_trusted}
    items = []
    for n, field in enumerate(attrs.fields(cls)):
        read = f"value.{field.name}"
        tp = field.type
        origin = get_origin(tp)
        nested = _nested_class(tp)
        if _plain(tp):
            expression = read
        elif origin is tuple and _plain(get_args(tp)[0]):
            expression = f"list({read})"
        elif origin is tuple and _nested_class(get_args(tp)[0]) is not None:
            # Mostly empty (a row's tool calls): no loop then.
            _bind(namespace, n, get_args(tp)[0])
            expression = (
                f"[e{n}(item) if type(item) is c{n} else encode(item) for item in {read}]"
                f" if {read} else []"
            )
        elif origin is tuple:
            expression = f"[encode(item) for item in {read}] if {read} else []"
        elif nested is not None:
            # The declared class is encoded directly (no dispatch); a subclass or None
            # goes through the general path.
            _bind(namespace, n, nested)
            expression = f"e{n}(x{n}) if type(x{n} := {read}) is c{n} else encode(x{n})"
        else:
            expression = f"encode({read})"
        items.append(f"{camel(field.name)!r}: ({expression})")
    source = "def encode_class(value):\n    return {" + ", ".join(items) + "}\n"
    exec(compile(source, f"<wire encoder of {cls.__name__}>", "exec"), namespace)
    encode: Callable[[Any], Any] = namespace["encode_class"]
    return encode


def _nested_class(tp: Any) -> type | None:
    """The declaration class ``tp`` names, alone or with None (else None)."""
    if isinstance(tp, type) and attrs.has(tp):
        return tp
    if get_origin(tp) in (typing.Union, types.UnionType):
        arms = [arm for arm in get_args(tp) if arm is not type(None)]
        if len(arms) == 1 and isinstance(arms[0], type) and attrs.has(arms[0]):
            return arms[0]
    return None


def _bind(namespace: dict[str, Any], n: int, cls: type) -> None:
    """``c{n}`` is ``cls`` and ``e{n}`` its encoder, generated on first use (classes may
    refer to themselves), after which the name points at the encoder itself."""
    namespace[f"c{n}"] = cls

    def first_use(value: Any) -> Any:
        encode = _ENCODERS.get(cls)
        if encode is None:
            encode = _ENCODERS[cls] = _generate(cls)
        namespace[f"e{n}"] = encode
        return encode(value)

    namespace[f"e{n}"] = first_use
