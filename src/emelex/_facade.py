"""Make a facade's public names report the facade as their module, as trio does.

``emelex.agent.AgentSession.__module__`` then reads ``"emelex.agent"`` (the name users
import), not the private ``emelex.agent._session`` that happens to define it: reprs,
docs and pickles point at the stable path.
"""

from __future__ import annotations

import contextlib
import sys
import types
from abc import ABCMeta
from collections.abc import Mapping
from typing import Any, NoReturn, TypeVar

import attrs


def _owned(facade: str, module: object) -> bool:
    """Whether ``module`` is a private module directly inside the ``facade`` package
    (``emelex.agent._session`` for ``emelex.agent``; not ``emelex.tools.mcp._config``
    for ``emelex.tools``: the sub-facade claims that one)."""
    if not isinstance(module, str) or not module.startswith(facade + "."):
        return False
    first = module[len(facade) + 1 :].split(".")[0]
    if first.startswith("_"):
        return True
    # A sub-package without a public list of its own is a room of this facade (the
    # service's ``ops``, ``transport``, ``workspace``), not a sub-facade.
    package = sys.modules.get(f"{facade}.{first}")
    return package is not None and not hasattr(package, "__all__") and module != package.__name__


def _fix(facade: str, value: Any, seen: set[int]) -> None:
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, type):
        if attrs.has(value):
            # Resolve string annotations while the defining module is still the lookup
            # scope: typing resolves a class's names in sys.modules[cls.__module__].
            # Annotations that only exist for type checkers stay strings.
            with contextlib.suppress(NameError):
                attrs.resolve_types(value)
        value.__module__ = facade
        for member in vars(value).values():
            inner = member.__func__ if isinstance(member, classmethod | staticmethod) else member
            if isinstance(inner, property):
                inner = inner.fget
            if isinstance(inner, types.FunctionType) and _owned(facade, inner.__module__):
                inner.__module__ = facade
    elif isinstance(value, types.FunctionType):
        value.__module__ = facade


def fix_module_names(facade: str, namespace: Mapping[str, Any]) -> None:
    """Point ``__module__`` of every class and function in ``namespace["__all__"]``
    that a private module of ``facade`` defines at ``facade``. Call it last in the
    facade's ``__init__``: ``fix_module_names(__name__, globals())``."""
    seen: set[int] = set()
    for name in namespace["__all__"]:
        value = namespace[name]
        if isinstance(value, type | types.FunctionType) and _owned(facade, value.__module__):
            _fix(facade, value, seen)


_T = TypeVar("_T")


class NoPublicConstructor(ABCMeta):
    """Metaclass of classes only the library creates (sessions, streams): calling the
    class raises TypeError; the library calls ``Class._create(...)`` instead. Such a
    class is also final at run time: subclassing it raises TypeError, as in trio."""

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]
    ) -> NoPublicConstructor:
        for base in bases:
            if isinstance(base, NoPublicConstructor):
                raise TypeError(f"{base.__module__}.{base.__qualname__} cannot be subclassed")
        return super().__new__(mcs, name, bases, namespace)

    def __call__(cls, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError(
            f"{cls.__module__}.{cls.__qualname__} has no public constructor; "
            "see its docstring for how to obtain one"
        )

    def _create(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        return super().__call__(*args, **kwargs)  # type: ignore[misc,no-any-return]
