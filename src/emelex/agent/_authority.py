"""The authority snapshot: a versioned, comparable record of what a session may do."""

from __future__ import annotations

import json
from typing import Any

import attrs
import cattrs

from emelex._errors import SerializationError
from emelex.agent._ceilings import ResourceCeilings
from emelex.tools import BuiltinSettings

AUTHORITY_VERSION = 1


@attrs.frozen
class WorkspaceIdentity:
    """The canonical workspace path and the device/inode of the opened directory."""

    path: str
    device: int
    inode: int


@attrs.frozen
class ToolAuthority:
    """One tool's declaration as authority: schema as canonical JSON (sorted keys)."""

    name: str
    description: str
    parameters: str
    cancellation_policy: str
    identity: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class AgentAuthoritySnapshot:
    """Everything that bounds a session's authority, and nothing else.

    It records the workspace identity, the exact tool declarations (sorted by name),
    built-in enablement and settings, and the effective ceilings. It deliberately
    leaves out the approval policy (a one-shot, per-call decision maker). Two snapshots
    are equal exactly when the authority is unchanged; persist :meth:`to_json` beside a
    stored session and compare on resume to detect drift.
    """

    workspace: WorkspaceIdentity
    tools: tuple[ToolAuthority, ...]
    builtins: BuiltinSettings
    ceilings: ResourceCeilings
    version: int = AUTHORITY_VERSION

    def to_json(self) -> str:
        return json.dumps(_converter.unstructure(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> AgentAuthoritySnapshot:
        try:
            data: Any = json.loads(text)
            if not isinstance(data, dict) or data.get("version") != AUTHORITY_VERSION:
                raise SerializationError(
                    f"unsupported authority snapshot version {data.get('version')!r}"
                    if isinstance(data, dict)
                    else "an authority snapshot must be a JSON object"
                )
            return _converter.structure(data, cls)
        except SerializationError:
            raise
        except (ValueError, TypeError, KeyError, cattrs.BaseValidationError) as exc:
            raise SerializationError(f"malformed authority snapshot: {exc}") from exc


_converter = cattrs.Converter(forbid_extra_keys=True)
