"""Agent packages: the shared vocabulary of the reader, the writer and the differ.

A package is a portable folder (see ``docs/app/packages.md``)::

    my-agent/
        agent.toml              # [agent] [model] [harness] [workspace] [[capabilities]] [plugins]
                                # [[hooks]] [[subagents]] (references to host code)
        instructions.md         # the agent's instructions, byte for byte
        files/**                # seeded editable files
        readonly/**             # seeded read-only files
        skills/<name>/SKILL.md  # front matter (name, description) and the skill's body
        skills/<name>/**        # the skill's other files (scripts, references, templates)
        plugins/<name>/         # optional local plugins named in [plugins] paths

The model is named by a symbolic *binding* (``"default"`` unless the manifest says
otherwise) that the host resolves at load time; no credential lives in a package.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs
import trio

from emelex.agent import DenyAll
from emelex.app._agent import Agent
from emelex.app._errors import UnboundModelError
from emelex.app._harness import Harness
from emelex.app._package_info import PRESETS, PackageInfo, preset_harness
from emelex.model import Capabilities, Client, GenerationRequest

MANIFEST = "agent.toml"
INSTRUCTIONS = "instructions.md"
SKILL_FILE = "SKILL.md"
#: Largest single file a package may hold, in bytes.
MAX_FILE_BYTES = 1024 * 1024
#: Largest total of all files of a package, in bytes.
MAX_PACKAGE_BYTES = 16 * 1024 * 1024
#: Most files a package may hold.
MAX_FILES = 2000
POLICIES = ("read_only", "read_write")
TOP_LEVEL = frozenset({MANIFEST, INSTRUCTIONS, "files", "readonly", "skills", "plugins"})
BINDING_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
VERSION = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}")


@attrs.frozen
class LoadedPackage:
    """What :func:`load_package` returns. The agent carries the package's metadata
    itself (``agent.package``, the one source every export reads); ``info`` is that
    value, kept for callers that predate it."""

    agent: Agent

    @property
    def info(self) -> PackageInfo:
        return self.agent.package

    def harness(self) -> Harness:
        """The harness preset the package names (``info.preset``)."""
        return self.info.harness()


@attrs.frozen
class UnboundModel:
    """The model of an agent loaded without ``bindings``: it has a ``binding`` name
    and fails every generation with :class:`UnboundModelError`. Lets a package be
    validated, inspected, diffed and exported without a model or credentials."""

    binding: str

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities()

    def generate(self, request: GenerationRequest) -> _UnboundGeneration:
        return _UnboundGeneration(self.binding)


class _UnboundGeneration:
    def __init__(self, binding: str) -> None:
        self._binding = binding

    async def __aenter__(self) -> Any:
        await trio.lowlevel.checkpoint()
        raise UnboundModelError(
            f"model binding {self._binding!r} was not resolved: load the package with "
            f"bindings={{{self._binding!r}: client}}"
        )

    async def __aexit__(self, *exc_info: object) -> None:
        return None


_UNBOUND: dict[str, Client] = {}
#: The approver of agents loaded without one: every gated call is denied.
DENY = DenyAll()


def unbound_client(binding: str) -> Client:
    """The shared placeholder client for ``binding`` (one per name, so agents loaded
    without bindings compare equal)."""
    client = _UNBOUND.get(binding)
    if client is None:
        client = _UNBOUND[binding] = Client(UnboundModel(binding))
    return client


#: Read-only view used by the reader's manifest checks.
KEYS: Mapping[str, frozenset[str]] = {
    "": frozenset(
        {"agent", "model", "harness", "workspace", "capabilities", "plugins", "hooks", "subagents"}
    ),
    "agent": frozenset({"name", "description", "version"}),
    "model": frozenset({"binding", "max_tokens", "temperature", "top_p", "seed", "stop"}),
    "harness": frozenset({"preset", "on_restart"}),
    "workspace": frozenset({"policy", "hidden", "recursive_delete"}),
    "capabilities": frozenset({"id", "options"}),
    "plugins": frozenset({"paths"}),
}

__all__ = [
    "BINDING_NAME",
    "DENY",
    "INSTRUCTIONS",
    "KEYS",
    "MANIFEST",
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_PACKAGE_BYTES",
    "POLICIES",
    "PRESETS",
    "SKILL_FILE",
    "TOP_LEVEL",
    "VERSION",
    "LoadedPackage",
    "PackageInfo",
    "UnboundModel",
    "preset_harness",
    "unbound_client",
]
