"""The agent service: the persisted Host that clients drive through the wire contracts.

:class:`Host` owns the store and the engine; every mutation carries an operation reference
and returns a durable receipt. :mod:`emelex.service.search` holds the pure search matcher
the Host uses. Keep this module free of eager engine imports: ``emelex.service.search``
must stay importable without Trio (``tests/service/test_search_module.py`` checks it), so
the Host's names load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emelex.service._cluster import ScaleOut
    from emelex.service._errors import (
        AttachmentError,
        ForkRefused,
        HostClosed,
        InteractionSettled,
        OperationConflict,
        QueueFull,
        ServiceError,
        UnknownAgent,
        UnknownInteraction,
        UnknownInvocation,
        UnknownSession,
    )
    from emelex.service._host import Host
    from emelex.service._store import STORE_ENV, store_from_environment

_LAZY = {
    "AttachmentError": "emelex.service._errors",
    "Host": "emelex.service._host",
    "ForkRefused": "emelex.service._errors",
    "HostClosed": "emelex.service._errors",
    "InteractionSettled": "emelex.service._errors",
    "OperationConflict": "emelex.service._errors",
    "QueueFull": "emelex.service._errors",
    "ScaleOut": "emelex.service._cluster",
    "STORE_ENV": "emelex.service._store",
    "store_from_environment": "emelex.service._store",
    "ServiceError": "emelex.service._errors",
    "UnknownAgent": "emelex.service._errors",
    "UnknownInteraction": "emelex.service._errors",
    "UnknownInvocation": "emelex.service._errors",
    "UnknownSession": "emelex.service._errors",
}

__all__ = [
    "STORE_ENV",
    "AttachmentError",
    "ForkRefused",
    "Host",
    "HostClosed",
    "InteractionSettled",
    "OperationConflict",
    "QueueFull",
    "ScaleOut",
    "ServiceError",
    "UnknownAgent",
    "UnknownInteraction",
    "UnknownInvocation",
    "UnknownSession",
    "store_from_environment",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from emelex._facade import fix_module_names

        value = getattr(importlib.import_module(_LAZY[name]), name)
        fix_module_names(__name__, {"__all__": [name], name: value})
        globals()[name] = value
        return value
    raise AttributeError(f"module 'emelex.service' has no attribute {name!r}")
