"""What ``--allow-workspace-reads`` covers: read-only file tool calls that stay inside
the session's workspace and touch no likely-secret path.

Judged with the workspace layer's own path parsing (:func:`classify_path`) and secret
rules, so the flag and the file tools never disagree about what a path means; anything
that cannot be classified for sure is not covered (and keeps asking).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping

import trio

from emelex.agent import ApprovalContext
from emelex.tools.workspace import WorkspaceError, classify_path

READ_TOOLS = frozenset({"read_file", "list_directory", "find_files", "grep"})

#: The arguments each read tool may carry for ``--allow-workspace-reads`` to judge it;
#: a call with any other argument is not classified and keeps asking.
_READ_ARGUMENTS: Mapping[str, frozenset[str]] = {
    "read_file": frozenset({"path", "offset", "limit"}),
    "list_directory": frozenset({"path"}),
    "find_files": frozenset({"pattern", "path", "include_secrets"}),
    "grep": frozenset(
        {"pattern", "path", "literal", "context", "case_insensitive", "glob", "include_secrets"}
    ),
}


def _link_on_path(root: str, parts: tuple[str, ...]) -> str | None:
    """The first component of ``root/parts`` that is a symbolic link (or cannot be
    checked), as a relative path; None when every existing component is a plain entry.
    A missing component ends the check: the tool itself reports it as not found."""
    current = root
    for index, name in enumerate(parts):
        current = os.path.join(current, name)
        try:
            info = os.lstat(current)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError:
            return "/".join(parts[: index + 1])
        if stat.S_ISLNK(info.st_mode):
            return "/".join(parts[: index + 1])
    return None


def workspace_read_refusal(context: ApprovalContext) -> str | None:
    """Why ``--allow-workspace-reads`` does not cover this call, or None when it does.

    Covered: a read-only file tool whose arguments are all known and whose path (after
    the file tools' own parsing) lies inside the session's workspace and matches no
    likely-secret rule, without asking to include secrets. Pure: the symbolic-link
    check is :func:`confined_read_refusal`.
    """
    call = context.call
    known = _READ_ARGUMENTS.get(call.name)
    if known is None:
        return f"{call.name} is not a read-only file tool"
    if context.workspace_root is None:
        return "the session's workspace root is unknown"
    extra = sorted(set(call.arguments) - known)
    if extra:
        return f"unexpected arguments {', '.join(extra)}"
    if call.arguments.get("include_secrets", False) is not False:
        return "it asks to include likely-secret files"
    path = call.arguments.get("path", ".")
    if not isinstance(path, str):
        return "its path is not text"
    try:
        target = classify_path(context.workspace_root, path)
    except WorkspaceError as exc:
        return f"its path is refused ({exc})"
    if target.outside:
        return f"{target.display} is outside the workspace"
    reason = target.secret_reason()
    if reason is not None:
        return f"{target.display} looks like a secret ({reason})"
    return None


async def confined_read_refusal(context: ApprovalContext) -> str | None:
    """:func:`workspace_read_refusal`, then a check that no existing component of the
    path is a symbolic link (which could lead out of the workspace). The file tools
    never follow links anyway; this keeps the flag's promise for any tool of the name."""
    refusal = workspace_read_refusal(context)
    if refusal is not None:
        return refusal
    assert context.workspace_root is not None
    target = classify_path(context.workspace_root, context.call.arguments.get("path", "."))
    link = await trio.to_thread.run_sync(_link_on_path, context.workspace_root, target.parts)
    if link is not None:
        return f"{link} is a symbolic link or cannot be checked"
    return None
