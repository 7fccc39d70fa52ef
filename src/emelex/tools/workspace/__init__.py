"""Descriptor-safe workspace file operations: the I/O layer under the file tools.

Open a root once with :meth:`Workspace.open`; every operation then walks paths one
component at a time from that descriptor with ``O_NOFOLLOW``, so symlinks are never
followed and a path cannot be redirected between a check and its use. Operations are
blocking functions meant for a worker thread. Approval decisions belong to the tool layer:
this package classifies (``is_secret_path``, ``OutsideWorkspace``) and accepts the
``allow_outside`` / ``allow_secret`` / ``include_secrets`` flags the harness passes only
after a one-shot approval of the exact call.
"""

from emelex._facade import fix_module_names
from emelex.tools.workspace._errors import (
    AtomicRenameUnsupported,
    ConcurrentModification,
    EditMismatch,
    HiddenPath,
    InvalidArgument,
    NotADirectory,
    NotFound,
    NotRegularFile,
    NotTextFile,
    OperationAborted,
    OutsideWorkspace,
    PathRejected,
    PatternError,
    PermissionDenied,
    SecretPath,
    SymlinkRefused,
    WorkspaceClosed,
    WorkspaceError,
    WorkspaceIOError,
)
from emelex.tools.workspace._hidden import HiddenPaths
from emelex.tools.workspace._leftovers import Leftover, LeftoverListing, list_leftovers
from emelex.tools.workspace._mutate import (
    MAX_WRITE_BYTES,
    EditResult,
    WriteResult,
    edit_file,
    write_file,
)
from emelex.tools.workspace._read import (
    DirectoryListing,
    DirEntry,
    FileContent,
    list_directory,
    read_file,
)
from emelex.tools.workspace._root import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    Target,
    Workspace,
    classify_path,
    split_path,
)
from emelex.tools.workspace._search import (
    DEFAULT_SKIP_DIRS,
    FindResult,
    Glob,
    GrepLine,
    GrepResult,
    compile_glob,
    find_files,
    grep,
)
from emelex.tools.workspace._secrets import SECRET_RULES, SecretRule, is_secret_path, secret_reason

__all__ = [
    "DEFAULT_SKIP_DIRS",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "MAX_WRITE_BYTES",
    "SECRET_RULES",
    "AtomicRenameUnsupported",
    "ConcurrentModification",
    "DirEntry",
    "DirectoryListing",
    "EditMismatch",
    "EditResult",
    "FileContent",
    "FindResult",
    "Glob",
    "GrepLine",
    "GrepResult",
    "HiddenPath",
    "HiddenPaths",
    "InvalidArgument",
    "Leftover",
    "LeftoverListing",
    "NotADirectory",
    "NotFound",
    "NotRegularFile",
    "NotTextFile",
    "OperationAborted",
    "OutsideWorkspace",
    "PathRejected",
    "PatternError",
    "PermissionDenied",
    "SecretPath",
    "SecretRule",
    "SymlinkRefused",
    "Target",
    "Workspace",
    "WorkspaceClosed",
    "WorkspaceError",
    "WorkspaceIOError",
    "WriteResult",
    "classify_path",
    "compile_glob",
    "edit_file",
    "find_files",
    "grep",
    "is_secret_path",
    "list_directory",
    "list_leftovers",
    "read_file",
    "secret_reason",
    "split_path",
    "write_file",
]

fix_module_names(__name__, globals())
