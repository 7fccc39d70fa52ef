"""Decoding the frames of a Host the client authenticated: shape-checked, not re-validated.

``from_wire`` runs cattrs and every declaration's construction checks (lengths,
patterns, ranges) on each field; on a watch catching up thousands of rows that is most
of the client's time, and the Host already enforced all of it when it built the values.
Here each wire type compiles once into a builder that checks only the JSON shape (an
object's exact keys, each value's JSON type, literals, a tagged union's ``kind``) and
builds the frozen instances without their construction checks (``trusted``). Malformed
input still raises :class:`ContractError` naming where; the transport bounds the frame
size and the JSON parser's nesting before any of this runs. Only for frames from the
Host; requests from clients always go through ``from_wire``.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from typing import Any, Final, Literal, get_args, get_origin

import attrs

from emelex.contracts._convert import camel, from_wire
from emelex.contracts._errors import ContractError
from emelex.contracts._wire import WIRE_STRINGS, tag_of

Build = Callable[[Any, str], Any]

_BUILDERS: dict[Any, Build] = {}


def decode_trusted(tp: Any, value: Any) -> Any:
    """``tp`` (a wire class or named union) built from the decoded JSON ``value``."""
    return _builder(tp)(value, "$")


def _builder(tp: Any) -> Build:
    found = _BUILDERS.get(tp)
    if found is None:
        found = _BUILDERS[tp] = _compile(tp)
    return found


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _compile(tp: Any) -> Build:
    if tp is Any:
        return _same
    if tp is str or tp in WIRE_STRINGS:
        return _string
    if tp is bool:
        return _boolean
    if tp is int:
        return _integer
    if tp is float:
        return _number
    if tp is type(None):
        return _null
    origin = get_origin(tp)
    if origin is Literal:
        return _literal(get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return _union(tp)
    if origin is tuple:
        return _array(get_args(tp)[0])
    if origin is dict:
        return _object
    if isinstance(tp, type) and attrs.has(tp):
        return _class(tp)

    # Anything else the declarations may grow: the full, checked path.
    def checked(value: Any, where: str) -> Any:
        return from_wire(tp, value)

    return checked


def _same(value: Any, where: str) -> Any:
    return value


def _string(value: Any, where: str) -> Any:
    if type(value) is not str:
        raise ContractError(f"{where}: expected a string, got {_kind(value)}")
    return value


def _boolean(value: Any, where: str) -> Any:
    if type(value) is not bool:
        raise ContractError(f"{where}: expected a boolean, got {_kind(value)}")
    return value


def _integer(value: Any, where: str) -> Any:
    if type(value) is not int:
        raise ContractError(f"{where}: expected an integer, got {_kind(value)}")
    return value


def _number(value: Any, where: str) -> Any:
    if type(value) is not int and type(value) is not float:
        raise ContractError(f"{where}: expected a number, got {_kind(value)}")
    return value


def _null(value: Any, where: str) -> Any:
    if value is not None:
        raise ContractError(f"{where}: expected null, got {_kind(value)}")
    return None


def _object(value: Any, where: str) -> Any:
    if type(value) is not dict:
        raise ContractError(f"{where}: expected an object, got {_kind(value)}")
    return value


def _literal(allowed: tuple[Any, ...]) -> Build:
    def literal(value: Any, where: str) -> Any:
        for constant in allowed:
            if type(value) is type(constant) and value == constant:
                return value
        raise ContractError(f"{where}: {value!r} is not one of {list(allowed)}")

    return literal


def _union(tp: Any) -> Build:
    arms = [arm for arm in get_args(tp) if arm is not type(None)]
    nullable = len(arms) < len(get_args(tp))
    tags = {tag_of(arm): arm for arm in arms}
    if len(arms) > 1 and None not in tags:
        # A tagged union: the member is named by the object's `kind`.
        members = {tag: _builder(arm) for tag, arm in tags.items()}

        def tagged(value: Any, where: str) -> Any:
            if value is None and nullable:
                return None
            if type(value) is not dict:
                raise ContractError(f"{where}: expected an object, got {_kind(value)}")
            build = members.get(value.get("kind"))
            if build is None:
                raise ContractError(f"{where}: unknown kind {value.get('kind')!r}")
            return build(value, where)

        return tagged
    builds = [_builder(arm) for arm in arms]

    def either(value: Any, where: str) -> Any:
        if value is None and nullable:
            return None
        failure = ContractError(f"{where}: null is not allowed here")
        for build in builds:
            try:
                return build(value, where)
            except ContractError as exc:
                failure = exc
        raise failure

    return either


def _array(item_type: Any) -> Build:
    item: Build | None = None

    def array(value: Any, where: str) -> Any:
        nonlocal item
        if type(value) is not list:
            raise ContractError(f"{where}: expected an array, got {_kind(value)}")
        if item is None:
            item = _builder(item_type)  # late: declarations may refer to themselves
        return tuple([item(entry, where) for entry in value])

    return array


def _class(cls: type) -> Build:
    """A builder generated for ``cls``: one function with every field's check inline
    (an object's keys, plain strings, integers, booleans, nullable strings, literal
    strings, empty arrays), the nested builders looked up on first use (declarations
    may refer to themselves), each value written straight into its frozen slot (as
    ``trusted`` does). Anything unusual goes through the field's general builder, which
    raises the precise error."""
    attrs.resolve_types(cls)  # a no-op for wire classes (resolved when declared)
    fields = [(f.name, camel(f.name), f.type) for f in attrs.fields(cls)]
    keys = [key for _, key, _ in fields]
    namespace: dict[str, Any] = {
        "ContractError": ContractError,
        "_kind": _kind,
        "_new": object.__new__,
        "_cls": cls,
        "_ready": False,
    }

    def fill() -> None:
        for n, (_, _, tp) in enumerate(fields):
            namespace[f"b{n}"] = _builder(tp)
        namespace["_ready"] = True

    def slow(value: dict[str, Any], where: str) -> Any:
        missing = sorted(k for k in keys if k not in value)
        unknown = sorted(str(k) for k in value if k not in keys)
        raise ContractError(f"{where}: {cls.__name__} missing {missing}, unknown {unknown}")

    namespace["_fill"] = fill
    namespace["_slow"] = slow
    lines = [
        "def build(value, where):",
        "    if type(value) is not dict:",
        f"        raise ContractError(f'{{where}}: expected a {cls.__name__} object, "
        "got {_kind(value)}')",
        f"    if len(value) != {len(fields)}:",
        "        _slow(value, where)",
        "    try:",
        *[f"        v{n} = value[{key!r}]" for n, (_, key, _) in enumerate(fields)],
        "        pass",
        "    except KeyError:",
        "        _slow(value, where)",
        "    if not _ready:",
        "        _fill()",
        "    instance = _new(_cls)",
    ]
    for n, (name, key, tp) in enumerate(fields):
        slot: Any = cls.__dict__.get(name)
        namespace[f"s{n}"] = slot.__set__ if hasattr(slot, "__set__") else _setattr(name)
        at = repr(f"{cls.__name__}.{key}")
        check = _inline_check(tp, f"v{n}", f"c{n}", namespace)
        if get_origin(tp) is tuple:
            # An empty array is the empty tuple whatever its item type.
            lines.append(f"    if type(v{n}) is list and not v{n}:")
            lines.append(f"        v{n} = ()")
            lines.append("    else:")
            lines.append(f"        v{n} = b{n}(v{n}, {at})")
        elif check is None:
            lines.append(f"    v{n} = b{n}(v{n}, {at})")
        else:
            lines.append(f"    if not ({check}):")
            lines.append(f"        v{n} = b{n}(v{n}, {at})")
        lines.append(f"    s{n}(instance, v{n})")
    lines.append("    return instance")
    exec(compile("\n".join(lines), f"<trusted builder of {cls.__name__}>", "exec"), namespace)
    built: Build = namespace["build"]
    return built


def _inline_check(tp: Any, name: str, constant: str, namespace: dict[str, Any]) -> str | None:
    """A Python expression true when ``name`` is already a valid value of ``tp`` as it
    is (None: always call the builder)."""
    if tp is str or tp in WIRE_STRINGS:
        return f"type({name}) is str"
    if tp is int or tp is bool:
        return f"type({name}) is {tp.__name__}"
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        arms = get_args(tp)
        others = [arm for arm in arms if arm is not type(None)]
        if len(others) == 1 and len(arms) == 2 and (others[0] is str or others[0] in WIRE_STRINGS):
            return f"{name} is None or type({name}) is str"
        return None
    if origin is Literal:
        allowed = get_args(tp)
        if all(type(value) is str for value in allowed):
            namespace[constant] = frozenset(allowed)
            return f"type({name}) is str and {name} in {constant}"
        return None
    return None


_NAMES: Final = {str: "a string", int: "an integer", bool: "a boolean"}


def _setattr(name: str) -> Callable[[Any, Any], None]:
    def put(instance: Any, value: Any) -> None:
        object.__setattr__(instance, name, value)

    return put
