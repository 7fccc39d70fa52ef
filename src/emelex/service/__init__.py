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
    from emelex.service._errors import (
        AttachmentError,
        FileAccessDenied,
        FileReadCorrupt,
        FileReadError,
        FileReadIncomplete,
        FileTooLarge,
        ForkRefused,
        HostClosed,
        InteractionSettled,
        InvalidWorkspacePath,
        OperationConflict,
        QueueFull,
        ServiceError,
        UnknownAgent,
        UnknownInteraction,
        UnknownInvocation,
        UnknownSession,
        UnrepresentableName,
        WorkspacePathNotFound,
        WorkspaceUnavailable,
    )
    from emelex.service._file_assembly import FileAssembler, FileSnapshot, assemble_file
    from emelex.service._host import Host

_LAZY = {
    "FileAssembler": "emelex.service._file_assembly",
    "FileSnapshot": "emelex.service._file_assembly",
    "assemble_file": "emelex.service._file_assembly",
    "FileAccessDenied": "emelex.service._errors",
    "FileReadCorrupt": "emelex.service._errors",
    "FileReadError": "emelex.service._errors",
    "FileReadIncomplete": "emelex.service._errors",
    "FileTooLarge": "emelex.service._errors",
    "InvalidWorkspacePath": "emelex.service._errors",
    "UnrepresentableName": "emelex.service._errors",
    "WorkspacePathNotFound": "emelex.service._errors",
    "WorkspaceUnavailable": "emelex.service._errors",
    "AttachmentError": "emelex.service._errors",
    "Host": "emelex.service._host",
    "ForkRefused": "emelex.service._errors",
    "HostClosed": "emelex.service._errors",
    "InteractionSettled": "emelex.service._errors",
    "OperationConflict": "emelex.service._errors",
    "QueueFull": "emelex.service._errors",
    "ServiceError": "emelex.service._errors",
    "UnknownAgent": "emelex.service._errors",
    "UnknownInteraction": "emelex.service._errors",
    "UnknownInvocation": "emelex.service._errors",
    "UnknownSession": "emelex.service._errors",
}

__all__ = [
    "AttachmentError",
    "FileAccessDenied",
    "FileAssembler",
    "FileReadCorrupt",
    "FileReadError",
    "FileReadIncomplete",
    "FileSnapshot",
    "FileTooLarge",
    "ForkRefused",
    "Host",
    "HostClosed",
    "InteractionSettled",
    "InvalidWorkspacePath",
    "OperationConflict",
    "QueueFull",
    "ServiceError",
    "UnknownAgent",
    "UnknownInteraction",
    "UnknownInvocation",
    "UnknownSession",
    "UnrepresentableName",
    "WorkspacePathNotFound",
    "WorkspaceUnavailable",
    "assemble_file",
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
