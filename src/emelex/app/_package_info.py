"""A package's own metadata (description, version, model binding, harness preset).

It lives beside :class:`~emelex.app.Agent` (which carries it as ``Agent.package``) rather
than with the package reader, so that the loader, both export paths and the builder
read one value: issue 30 found ``Agent.export`` writing defaults where ``emelex agents
export`` kept the package's own metadata, because only the latter had it.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

from emelex.app._harness import Harness

_PRESET_FACTORIES: dict[str, Callable[[], Harness]] = {
    "base": Harness.base,
    "conversation": Harness.conversation,
    "worker": Harness.worker,
    "shell_worker": Harness.shell_worker,
}
#: The harness presets a package may name.
PRESETS = tuple(_PRESET_FACTORIES)
#: Presets whose harness writes (the shell): a package naming one must be read_write.
WRITING_PRESETS = frozenset({"shell_worker"})


def preset_harness(name: str) -> Harness:
    """A new harness of the preset ``name`` (one of :data:`PRESETS`; ``KeyError`` else)."""
    return _PRESET_FACTORIES[name]()


@attrs.frozen
class PackageInfo:
    """What a package says besides the agent's behaviour; its defaults are the values a
    manifest that omits a key means (the reader and the writer both use them)."""

    # text only: a number here would be written as a TOML number the reader refuses
    description: str = attrs.field(default="", validator=attrs.validators.instance_of(str))
    version: str = attrs.field(default="0.1.0", validator=attrs.validators.instance_of(str))
    binding: str = attrs.field(default="default", validator=attrs.validators.instance_of(str))
    preset: str = attrs.field(default="base", validator=attrs.validators.instance_of(str))

    def harness(self) -> Harness:
        """The harness preset the package names."""
        return preset_harness(self.preset)


#: What a manifest that omits a metadata key means (reader, checker and writer agree).
DEFAULTS = PackageInfo()


__all__ = ["DEFAULTS", "PRESETS", "WRITING_PRESETS", "PackageInfo", "preset_harness"]
