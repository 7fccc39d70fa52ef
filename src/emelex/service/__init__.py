"""The agent service: the persisted Host that clients drive through the wire contracts.

:class:`Host` owns the store and the engine; every mutation carries an operation reference
and returns a durable receipt. :class:`HostClient` reaches a Host that ``emelex serve``
runs, over its Unix socket or TCP, with the same methods.
:mod:`emelex.service.search` holds the pure search matcher the Host uses. Keep this
module free of eager engine imports: ``emelex.service.search`` must stay importable
without Trio (``tests/service/test_search_module.py`` checks it), so the Host's names
load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emelex.service._api import (
        HostAPI,
    )
    from emelex.service._cluster import (
        ScaleOut,
    )
    from emelex.service._errors import (
        AttachmentError,
        ExternalFilterUnsupported,
        FileAccessDenied,
        FileReadCorrupt,
        FileReadError,
        FileReadIncomplete,
        FileTooLarge,
        ForkRefused,
        GitLimitExceeded,
        GitRepositoryError,
        GitUnsupported,
        HostClosed,
        HostLocked,
        InteractionSettled,
        InvalidRequest,
        InvalidWorkspacePath,
        NotRepositoryRoot,
        OperationConflict,
        QueueFull,
        RequestTimedOut,
        RequestTooLarge,
        ServeError,
        ServiceError,
        SparseCheckoutUnsupported,
        SubmoduleUnsupported,
        TooManyConnections,
        TransportError,
        Unauthorized,
        UnknownAgent,
        UnknownInteraction,
        UnknownInvocation,
        UnknownPatch,
        UnknownRoute,
        UnknownSession,
        UnrepresentableName,
        WorkspacePathNotFound,
        WorkspaceUnavailable,
    )
    from emelex.service._host import (
        Host,
    )
    from emelex.service._store import (
        STORE_ENV,
        store_from_environment,
    )
    from emelex.service.transport._client import (
        HostClient,
    )
    from emelex.service.transport._serve import (
        Listen,
        ServeOptions,
        Serving,
        serve,
    )
    from emelex.service.workspace._file_assembly import (
        FileAssembler,
        FileSnapshot,
        assemble_file,
    )

_LAZY = {
    "AttachmentError": "emelex.service._errors",
    "ExternalFilterUnsupported": "emelex.service._errors",
    "FileAccessDenied": "emelex.service._errors",
    "FileAssembler": "emelex.service.workspace._file_assembly",
    "FileReadCorrupt": "emelex.service._errors",
    "FileReadError": "emelex.service._errors",
    "FileReadIncomplete": "emelex.service._errors",
    "FileSnapshot": "emelex.service.workspace._file_assembly",
    "FileTooLarge": "emelex.service._errors",
    "ForkRefused": "emelex.service._errors",
    "GitLimitExceeded": "emelex.service._errors",
    "GitRepositoryError": "emelex.service._errors",
    "GitUnsupported": "emelex.service._errors",
    "Host": "emelex.service._host",
    "HostClient": "emelex.service.transport._client",
    "HostClosed": "emelex.service._errors",
    "HostLocked": "emelex.service._errors",
    "InteractionSettled": "emelex.service._errors",
    "InvalidRequest": "emelex.service._errors",
    "InvalidWorkspacePath": "emelex.service._errors",
    "Listen": "emelex.service.transport._serve",
    "NotRepositoryRoot": "emelex.service._errors",
    "OperationConflict": "emelex.service._errors",
    "QueueFull": "emelex.service._errors",
    "RequestTimedOut": "emelex.service._errors",
    "RequestTooLarge": "emelex.service._errors",
    "STORE_ENV": "emelex.service._store",
    "ScaleOut": "emelex.service._cluster",
    "HostAPI": "emelex.service._api",
    "ServeError": "emelex.service._errors",
    "ServeOptions": "emelex.service.transport._serve",
    "ServiceError": "emelex.service._errors",
    "Serving": "emelex.service.transport._serve",
    "SparseCheckoutUnsupported": "emelex.service._errors",
    "SubmoduleUnsupported": "emelex.service._errors",
    "TooManyConnections": "emelex.service._errors",
    "TransportError": "emelex.service._errors",
    "Unauthorized": "emelex.service._errors",
    "UnknownAgent": "emelex.service._errors",
    "UnknownInteraction": "emelex.service._errors",
    "UnknownInvocation": "emelex.service._errors",
    "UnknownPatch": "emelex.service._errors",
    "UnknownRoute": "emelex.service._errors",
    "UnknownSession": "emelex.service._errors",
    "UnrepresentableName": "emelex.service._errors",
    "WorkspacePathNotFound": "emelex.service._errors",
    "WorkspaceUnavailable": "emelex.service._errors",
    "assemble_file": "emelex.service.workspace._file_assembly",
    "serve": "emelex.service.transport._serve",
    "store_from_environment": "emelex.service._store",
}

__all__ = [
    "AttachmentError",
    "ExternalFilterUnsupported",
    "FileAccessDenied",
    "FileAssembler",
    "FileReadCorrupt",
    "FileReadError",
    "FileReadIncomplete",
    "FileSnapshot",
    "FileTooLarge",
    "ForkRefused",
    "GitLimitExceeded",
    "GitRepositoryError",
    "GitUnsupported",
    "Host",
    "HostClient",
    "HostClosed",
    "HostLocked",
    "InteractionSettled",
    "InvalidRequest",
    "InvalidWorkspacePath",
    "Listen",
    "NotRepositoryRoot",
    "OperationConflict",
    "QueueFull",
    "RequestTimedOut",
    "RequestTooLarge",
    "STORE_ENV",
    "ScaleOut",
    "HostAPI",
    "ServeError",
    "ServeOptions",
    "ServiceError",
    "Serving",
    "SparseCheckoutUnsupported",
    "SubmoduleUnsupported",
    "TooManyConnections",
    "TransportError",
    "Unauthorized",
    "UnknownAgent",
    "UnknownInteraction",
    "UnknownInvocation",
    "UnknownPatch",
    "UnknownRoute",
    "UnknownSession",
    "UnrepresentableName",
    "WorkspacePathNotFound",
    "WorkspaceUnavailable",
    "assemble_file",
    "serve",
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
